"""Model presets and the validated configuration of one synthetic training job.

Presets are the GPT-3 sizes of the Lumos paper (Table 1; all with sequence 2048 and head
dimension 128). A :class:`SynthConfig` fixes the model, the 3D-parallel layout (Megatron order:
tensor-parallel ranks are consecutive, then data-parallel, then pipeline), the microbatching,
the GPU and the generator's seed; it round-trips through JSON (``to_json``/``from_json``) and is
stored in every generated file under ``"lumos_synth_config"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu
from lumos_core.whatif.schedules import SCHEDULES

__all__ = ["PRESETS", "ModelSpec", "SynthConfig", "model_from_args"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A GPT (decoder-only transformer) shape."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    seq: int
    vocab: int = 51200  # GPT-3's 50257 padded to a multiple of 128 * 8 as Megatron does
    kv_channels: int = 0  # head dimension (Megatron --kv-channels); 0: hidden // heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def attn_dim(self) -> int:
        """Width of Q, K, V and the attention output: heads x head dimension."""
        return self.heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights and biases of one layer: QKV (3ha + 3a), proj (ah + h), MLP (2hf + f + h), 2 LayerNorms."""
        h, f, a = self.hidden, self.ffn, self.attn_dim
        return 4 * h * a + 3 * a + h + 2 * h * f + f + h + 4 * h

    @property
    def params(self) -> int:
        """All parameters with untied input/output embeddings, learned positions, final LayerNorm."""
        return (
            self.layers * self.layer_params
            + 2 * self.vocab * self.hidden
            + self.seq * self.hidden
            + 2 * self.hidden
        )


# Lumos paper, Table 1 (nlayers, dmodel, dffn, nheads; dhead = 128, sequence 2048). The 44B row has
# 48 heads of 128 = 6144 < dmodel 12288, i.e. Megatron's --kv-channels 128: with it the model has
# 44.7 B parameters as its name says (full-width attention would make it 58 B).
PRESETS: dict[str, ModelSpec] = {
    "gpt3-15b": ModelSpec("gpt3-15b", 48, 6144, 12288, 48, 2048),
    "gpt3-44b": ModelSpec("gpt3-44b", 48, 12288, 24576, 48, 2048, kv_channels=128),
    "gpt3-117b": ModelSpec("gpt3-117b", 96, 12288, 24576, 96, 2048),
    "gpt3-175b": ModelSpec("gpt3-175b", 96, 12288, 49152, 96, 2048),
}


def model_from_args(
    name: str,
    layers: int | None = None,
    hidden: int | None = None,
    ffn: int | None = None,
    heads: int | None = None,
    seq: int | None = None,
    vocab: int | None = None,
    kv_channels: int | None = None,
) -> ModelSpec:
    """A preset, optionally with some dimensions overridden, or a "custom" model (all required)."""
    overrides = {
        "layers": layers,
        "hidden": hidden,
        "ffn": ffn,
        "heads": heads,
        "seq": seq,
        "vocab": vocab,
        "kv_channels": kv_channels,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    if name == "custom":
        missing = [k for k in ("layers", "hidden", "heads", "seq") if k not in given]
        if missing:
            raise ConfigError(f"--model custom needs {', '.join('--' + m for m in missing)}")
        given.setdefault("ffn", 4 * given["hidden"])
        return ModelSpec(name="custom", **given)
    if name not in PRESETS:
        raise ConfigError(f"unknown model {name!r}: use one of {', '.join(PRESETS)} or custom")
    base = PRESETS[name]
    if not given:
        return base
    fields = asdict(base)
    fields.update(given)
    fields["name"] = f"{name}-modified"
    return ModelSpec(**fields)


@dataclass(frozen=True)
class SynthConfig:
    """Everything that determines a synthetic job; the same config and seed give the same bytes."""

    model: ModelSpec = field(default_factory=lambda: PRESETS["gpt3-15b"])
    tp: int = 2
    pp: int = 2
    dp: int = 2
    microbatches: int = 0  # 0: twice the pipeline depth
    micro_batch: int = 1
    schedule: str = "1f1b"
    gpu: str = "H100"
    iterations: int = 2
    seed: int = 0
    bucket_params: int = 40_000_000  # Megatron DDP's default gradient bucket size
    first_step: int = 1  # number of the first ProfilerStep#N
    # ground truth for straggler detection: (rank, factor) pairs, that rank's kernels factor x longer
    slow_ranks: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.microbatches == 0:
            object.__setattr__(self, "microbatches", 2 * self.pp)
        self.validate()

    # ---- derived sizes ----
    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def layers_per_stage(self) -> int:
        return self.model.layers // self.pp

    @property
    def tokens(self) -> int:
        """Tokens per microbatch (rows of every GEMM)."""
        return self.micro_batch * self.model.seq

    def validate(self) -> None:
        m = self.model
        for name in ("tp", "pp", "dp", "microbatches", "micro_batch", "iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("layers", "hidden", "ffn", "heads", "seq", "vocab", "head_dim"):
            if getattr(m, name) < 1:
                raise ConfigError(f"model {name} must be >= 1, got {getattr(m, name)}")
        if m.layers % self.pp:
            raise ConfigError(f"{m.layers} layers cannot be split evenly into {self.pp} pipeline stages")
        if not m.kv_channels and m.hidden % m.heads:
            raise ConfigError(f"hidden size {m.hidden} is not a multiple of {m.heads} heads")
        for what, value in (
            ("heads", m.heads),
            ("ffn size", m.ffn),
            ("vocabulary", m.vocab),
            ("hidden size", m.hidden),
        ):
            if value % self.tp:
                raise ConfigError(f"{what} {value} is not divisible by tensor parallelism {self.tp}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(
                f"unknown pipeline schedule {self.schedule!r}: use one of {', '.join(SCHEDULES)}"
            )
        get_gpu(self.gpu)  # raises ConfigError for unknown GPUs
        if self.bucket_params < 1:
            raise ConfigError("bucket size must be >= 1 parameter")
        for r, f in self.slow_ranks:
            if not (0 <= r < self.world_size and f > 0):
                raise ConfigError(
                    f"--slow-rank {r}:{f}: the rank must be in 0-{self.world_size - 1}, the factor > 0"
                )

    def speed_factor(self, rank: int) -> float:
        """How much longer ``rank``'s kernels run than its GPU's own speed gives (``--slow-rank``)."""
        return next((float(f) for r, f in self.slow_ranks if r == rank), 1.0)

    # ---- rank layout (Megatron order tp-dp-pp: TP fastest) ----
    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pipeline stage, data-parallel index, tensor-parallel index) of a global rank."""
        return rank // (self.tp * self.dp), (rank // self.tp) % self.dp, rank % self.tp

    def rank_of(self, stage: int, dp_index: int, tp_index: int) -> int:
        return stage * self.tp * self.dp + dp_index * self.tp + tp_index

    # ---- JSON ----
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.slow_ranks:
            del d["slow_ranks"]  # the usual job's JSON (and demo cache key) as before the option
        d["world_size"] = self.world_size
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SynthConfig:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["model"] = ModelSpec(**fields["model"])
        fields["slow_ranks"] = tuple(tuple(x) for x in fields.get("slow_ranks", ()))
        return cls(**fields)
