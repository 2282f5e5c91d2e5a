"""Model presets and the validated configuration of one synthetic training job.

Presets are the GPT-3 sizes of the Lumos paper (Table 1; all with sequence 2048 and head
dimension 128) and the Llama 3 dense models (8B/70B/405B: grouped-query attention with 8 KV heads,
SwiGLU feed-forward, RMSNorm, rotary positions, no biases, untied 128,256-token embeddings; Meta's
model cards). Their FLOPs and memory formulas are in :mod:`lumos_core.synth.flops` and
docs/performance-model.md. A :class:`SynthConfig` fixes the model, the parallel layout (Megatron order:
tensor-parallel ranks are consecutive, then context-parallel, data-parallel, pipeline), the microbatching,
the GPU and the generator's seed; it round-trips through JSON (``to_json``/``from_json``) and is
stored in every generated file under ``"lumos_synth_config"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu
from lumos_core.perf.schedules import SCHEDULES
from lumos_core.trace.process_groups import GroupLayout

__all__ = ["ATTENTION", "PRESETS", "RECOMPUTE", "ModelSpec", "SynthConfig", "model_from_args"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer shape: GPT-3 style (LayerNorm, GeLU MLP, biases, learned
    positions) or Llama style (``kv_heads`` < heads: grouped-query attention; ``gated_ffn``:
    SwiGLU, three GEMMs; ``norm`` "rmsnorm"; no biases; rotary positions)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    seq: int
    vocab: int = 51200  # GPT-3's 50257 padded to a multiple of 128 * 8 as Megatron does
    kv_channels: int = 0  # head dimension (Megatron --kv-channels); 0: hidden // heads
    kv_heads: int = 0  # key/value heads (GQA, Megatron --num-query-groups); 0: as many as heads
    gated_ffn: bool = False  # SwiGLU: gate and up projections (h x 2f), then down (f x h)
    norm: str = "layernorm"  # or "rmsnorm"
    bias: bool = True  # linear layers carry biases (GPT-3) or not (Llama)
    learned_positions: bool = True  # a learned position table (GPT-3) or rotary (Llama, no weights)

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def attn_dim(self) -> int:
        """Width of Q and of the attention output: heads x head dimension."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): KV heads x head dimension."""
        return self.n_kv_heads * self.head_dim

    @property
    def qkv_dim(self) -> int:
        """Output width of the fused QKV projection."""
        return self.attn_dim + 2 * self.kv_dim

    @property
    def ffn_in_dim(self) -> int:
        """Output width of the first MLP GEMM (gate and up fused for SwiGLU)."""
        return 2 * self.ffn if self.gated_ffn else self.ffn

    @property
    def norm_params(self) -> int:
        return self.hidden if self.norm == "rmsnorm" else 2 * self.hidden

    @property
    def layer_params(self) -> int:
        """Weights (and biases) of one layer: QKV h(a + 2kv), projection ah, MLP h(f_in + f),
        two norms."""
        h, f, a = self.hidden, self.ffn, self.attn_dim
        weights = h * self.qkv_dim + a * h + h * self.ffn_in_dim + f * h
        biases = (self.qkv_dim + h + self.ffn_in_dim + h) if self.bias else 0
        return weights + biases + 2 * self.norm_params

    @property
    def params(self) -> int:
        """All parameters: untied input/output embeddings, positions if learned, final norm."""
        return (
            self.layers * self.layer_params
            + 2 * self.vocab * self.hidden
            + (self.seq * self.hidden if self.learned_positions else 0)
            + self.norm_params
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
# Llama 3 (Meta, "The Llama 3 Herd of Models", Table 3): layers, model dim, FFN dim, heads, 8 KV
# heads, vocabulary 128,256, sequence 8,192 (the pre-training length).
_LLAMA = {"kv_heads": 8, "gated_ffn": True, "norm": "rmsnorm", "bias": False, "learned_positions": False}
PRESETS.update(
    {
        "llama3-8b": ModelSpec("llama3-8b", 32, 4096, 14336, 32, 8192, vocab=128256, **_LLAMA),
        "llama3-70b": ModelSpec("llama3-70b", 80, 8192, 28672, 64, 8192, vocab=128256, **_LLAMA),
        "llama3-405b": ModelSpec("llama3-405b", 126, 16384, 53248, 128, 8192, vocab=128256, **_LLAMA),
    }
)
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "unfused")


def model_from_args(
    name: str,
    layers: int | None = None,
    hidden: int | None = None,
    ffn: int | None = None,
    heads: int | None = None,
    seq: int | None = None,
    vocab: int | None = None,
    kv_channels: int | None = None,
    kv_heads: int | None = None,
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
        "kv_heads": kv_heads,
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
    recompute: str = "none"  # activation recomputation: none, selective (attention core), full
    sp: bool = False  # sequence parallelism: TP all-reduces become reduce-scatter + all-gather
    vp: int = 1  # virtual pipeline stages per rank (interleaved 1F1B when > 1)
    cp: int = 1  # context parallelism: the sequence split over cp ranks (ring attention)
    attention: str = "flash"  # fused flash attention, or Megatron's unfused QK^T/softmax/PV kernels
    # The CPU blocks on each pipeline transfer (DeepSpeed's pipeline engine: synchronous send/recv)
    # instead of queueing it on a stream and running ahead (Megatron-LM). Trace-free only.
    p2p_blocks_cpu: bool = False
    # The CPU waits for the GPU at every (checkpointed) layer boundary, forward and backward
    # (DeepSpeed's activation checkpointing with synchronize_checkpoint_boundary, per-layer timers):
    # host and GPU time of a layer then add up instead of overlapping across layers.
    layer_sync: bool = False
    # ground truth for straggler detection: (rank, factor) pairs, that rank's kernels factor x longer
    slow_ranks: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.microbatches == 0:
            object.__setattr__(self, "microbatches", 2 * self.pp)
        self.validate()

    # ---- derived sizes ----
    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def layers_per_stage(self) -> int:
        return self.model.layers // self.pp

    @property
    def tokens(self) -> int:
        """Tokens per microbatch on one rank (rows of every GEMM): the sequence is split over CP."""
        return self.micro_batch * self.model.seq // self.cp

    @property
    def dp_cp(self) -> int:
        """Ranks that reduce gradients and shard the optimizer (Megatron's DP x CP group)."""
        return self.dp * self.cp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.microbatches * self.dp

    def validate(self) -> None:
        m = self.model
        for name in ("tp", "pp", "dp", "microbatches", "micro_batch", "iterations", "vp", "cp"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("layers", "hidden", "ffn", "heads", "seq", "vocab", "head_dim"):
            if getattr(m, name) < 1:
                raise ConfigError(f"model {name} must be >= 1, got {getattr(m, name)}")
        if m.layers % (self.pp * self.vp):
            raise ConfigError(
                f"{m.layers} layers cannot be split evenly into {self.pp} pipeline stages"
                + (f" x {self.vp} virtual stages" if self.vp > 1 else "")
                + f": {_even_layers_hint(m.layers, self.pp * self.vp)} (uneven stages, such as one "
                "layer fewer on the first and last stage, are not modelled)"
            )
        if self.vp > 1 and (self.pp < 2 or self.microbatches % self.pp):
            raise ConfigError(
                f"--vp {self.vp} (interleaved 1F1B) needs --pp >= 2 and microbatches a multiple of "
                f"--pp ({self.microbatches} microbatches, pp {self.pp})"
            )
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"unknown --recompute {self.recompute!r}: use one of {', '.join(RECOMPUTE)}")
        if self.attention not in ATTENTION:
            raise ConfigError(f"unknown attention {self.attention!r}: use one of {', '.join(ATTENTION)}")
        if self.cp > 1 and m.seq % (2 * self.cp):  # Megatron's load-balanced split: 2 x CP chunks
            raise ConfigError(
                f"sequence {m.seq} is not divisible by 2 x context parallelism {self.cp} "
                f"(load-balanced CP cuts it into {2 * self.cp} equal chunks)"
            )
        if self.cp > 1 and self.attention != "flash":
            # Megatron-Core runs CP only inside TransformerEngine's fused attention (the ring).
            raise ConfigError("context parallelism (--cp) needs fused attention: drop --attention unfused")
        if m.norm not in ("layernorm", "rmsnorm"):
            raise ConfigError(f"unknown norm {m.norm!r}: use layernorm or rmsnorm")
        if m.heads % m.n_kv_heads:
            raise ConfigError(f"{m.heads} heads are not a multiple of {m.n_kv_heads} KV heads")
        if not m.kv_channels and m.hidden % m.heads:
            raise ConfigError(f"hidden size {m.hidden} is not a multiple of {m.heads} heads")
        for what, value in (
            ("heads", m.heads),
            ("KV heads", m.n_kv_heads),
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

    # ---- rank layout: the one the trace writer's process groups use (Megatron order, TP fastest) ----
    def layout(self) -> GroupLayout:
        return GroupLayout(self.tp, self.dp, self.pp, cp=self.cp)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pipeline stage, data-parallel index, tensor-parallel index) of a global rank."""
        return self.layout().coords(rank)

    def cp_index(self, rank: int) -> int:
        return self.layout().cp_index(rank)

    def rank_of(self, stage: int, dp_index: int, tp_index: int, cp_index: int = 0) -> int:
        return self.layout().rank_of(stage, dp_index, tp_index, cp_index)

    # ---- JSON ----
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.slow_ranks:
            del d["slow_ranks"]  # the usual job's JSON (and demo cache key) as before the option
        if not self.layer_sync:
            del d["layer_sync"]  # likewise
        d["world_size"] = self.world_size
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SynthConfig:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["model"] = ModelSpec(**fields["model"])
        fields["slow_ranks"] = tuple(tuple(x) for x in fields.get("slow_ranks", ()))
        return cls(**fields)


def _even_layers_hint(layers: int, chunks: int) -> str:
    """'use --layers 128 (or 112)': the layer counts nearest ``layers`` that split into ``chunks``,
    the nearer first (a model of 126 layers over 16 stages is priced as 128, or 112, of them)."""
    below, above = layers // chunks * chunks, -(-layers // chunks) * chunks
    options = sorted((n for n in (below, above) if n > 0), key=lambda n: (abs(n - layers), n))
    return f"use --layers {options[0]}" + (f" (or {options[1]})" if len(options) > 1 else "")
