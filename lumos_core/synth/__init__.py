"""``lumos synth``: a generator of realistic, *synthetic* Megatron-LM training traces.

See :func:`synthesize` (:mod:`.generate`), the presets in :mod:`.models`, the per-stage operation
sequence in :mod:`.plan` and the causal timing simulation in :mod:`.timeline`.
"""

from lumos_core.synth.generate import GENERATOR_VERSION, SynthResult, rank_file_name, synthesize
from lumos_core.synth.models import PRESETS, ModelSpec, SynthConfig, model_from_args

__all__ = [
    "GENERATOR_VERSION",
    "PRESETS",
    "ModelSpec",
    "SynthConfig",
    "SynthResult",
    "model_from_args",
    "rank_file_name",
    "synthesize",
]
