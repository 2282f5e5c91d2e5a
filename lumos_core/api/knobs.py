"""What a what-if may change: the knob registry, the configuration, the GPUs and hardware profiles.

* :data:`REGISTRY` / :data:`KNOB`: every knob (name, type, unit, label, help, group, validation,
  the re-timing rule it triggers), in the order the CLI and the app show them; :func:`grouped`
  arranges them by group (Parallelism, Model, Hardware, Memory) and :func:`traced_value` gives a
  knob's traced value with how it was found.
* :class:`JobConfig` (one field per knob) and :class:`Baseline` (the traced configuration, field
  by field with its source: :func:`infer_baseline`); :func:`problems` lists what makes a
  configuration invalid (:func:`check` raises ``ConfigError`` with it).
* Changes as text, read as the CLI reads them: :func:`parse_changes` (``"dp=16 gpu=H200"``),
  :func:`coerce_value` / :func:`coerce_changes` (one value or a dict), :func:`format_changes`.
* :data:`GPUS` (the built-in GPU models by name) and :class:`HardwareProfile` (rates fitted by
  ``lumos calibrate``: ``HardwareProfile.load(path)``).
* Throughput comparisons: :data:`WORK_KNOBS` change the work of one iteration (their scenarios
  compare by rate), :data:`MODEL_KNOBS` the FLOPs per token, :data:`GPU_BOUND_CPU_SCALE` is the
  host-time factor of the one-click "assume GPU-bound".
"""

from lumos_core.perf.hardware import GPUS, GpuProfile
from lumos_core.perf.profile import HardwareProfile
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import Baseline, JobConfig, check, problems
from lumos_core.whatif.knob_registry import KNOB, REGISTRY, Knob, grouped, traced_value
from lumos_core.whatif.knobs import INT_KNOBS, coerce_changes, coerce_value, format_changes, parse_changes
from lumos_core.whatif.throughput import GPU_BOUND_CPU_SCALE, MODEL_KNOBS, WORK_KNOBS

__all__ = [
    "GPUS",
    "GPU_BOUND_CPU_SCALE",
    "INT_KNOBS",
    "KNOB",
    "MODEL_KNOBS",
    "REGISTRY",
    "WORK_KNOBS",
    "Baseline",
    "GpuProfile",
    "HardwareProfile",
    "JobConfig",
    "Knob",
    "check",
    "coerce_changes",
    "coerce_value",
    "format_changes",
    "grouped",
    "infer_baseline",
    "parse_changes",
    "problems",
    "traced_value",
]
