"""Infer the configuration a trace was recorded with (paper §3.4's starting point).

What the trace records is taken as certain (world size, process groups with their descriptions,
GPU model, GEMM shapes when ``record_shapes`` was on); what follows from patterns is "inferred"
(which group is tensor/pipeline/data parallel from the collectives on it, layers from annotations,
microbatches from repeated forward passes); the rest is a "guess" or "unknown" and the user can
give it. ``lumos estimate --show-baseline`` prints all of it.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu
from lumos_core.trace.kernel_families import GEMM_OPS
from lumos_core.trace.model import CollectiveKind, Job, Kind, RankTrace
from lumos_core.whatif.config import Baseline, Inferred, JobConfig
from lumos_core.whatif.knob_registry import KNOB
from lumos_core.whatif.layer_names import layer_index
from lumos_core.whatif.row_groups import group_ids
from lumos_core.whatif.segments import layer_count_from_kernels

_P2P = (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV)


def _role_from_desc(desc: str) -> str | None:
    d = desc.lower()
    if "tensor" in d or d in ("tp", "mp", "tp_group") or "tensor_model" in d:
        return "tp"
    if "pipeline" in d or d in ("pp", "pp_group") or ("embedding" in d and "pipeline" in d):
        return "pp"
    if d.startswith("context") or d in ("cp", "cp_group"):  # Megatron's CP ring: send/recv, no pipeline
        return "cp"
    if "data" in d or d in ("dp", "dp_cp", "dp_group", "fsdp", "zero"):
        return "dp"
    return None


def process_groups(job: Job) -> dict[str, dict[str, Any]]:
    """pg name -> {"ranks": [...], "desc": str} from every rank's distributedInfo and collectives."""
    groups: dict[str, dict[str, Any]] = {}
    for t in job.ranks:
        info = t.metadata.get("distributedInfo") or {}
        for pg in info.get("pg_config") or [] if isinstance(info, dict) else []:
            if not isinstance(pg, dict):
                continue
            name = str(pg.get("pg_name", ""))
            if name in groups:  # every rank lists the group: the first valid entry is kept
                continue
            ranks = pg.get("ranks")
            if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
                groups.setdefault(name, {"ranks": sorted(ranks), "desc": str(pg.get("pg_desc", ""))})
        c = t.collectives
        for pg, granks in _first_pairs(c.pg, c.group_ranks):
            if pg < 0:
                continue
            name = t.strings[pg]
            if name not in groups and granks >= 0:
                text = t.strings[granks]
                try:
                    ranks = [int(x) for x in text.strip("[] ").split(",") if x.strip()]
                except ValueError:
                    continue
                groups[name] = {"ranks": sorted(ranks), "desc": ""}
    return groups


def _collective_kinds_by_group(job: Job) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for t in job.ranks:
        c = t.collectives
        for pg, kind, count in _first_pairs(c.pg, c.kind, counts=True):
            out[t.strings[pg] if pg >= 0 else "?"][CollectiveKind(kind)] += count
    return out


def _first_pairs(a: np.ndarray, b: np.ndarray, counts: bool = False) -> list[tuple[int, ...]]:
    """The distinct (a, b) pairs of two int columns in order of first appearance (with how many
    times each appears): what a loop over every row sees first, in one pass over the arrays."""
    ids, first = group_ids(a, b)
    cols = [np.asarray(a)[first].tolist(), np.asarray(b)[first].tolist()]
    if counts:
        cols.append(np.bincount(ids, minlength=len(first)).tolist())
    return list(zip(*cols))


def group_roles(job: Job) -> tuple[dict[str, str], dict[str, str]]:
    """(pg name -> "tp"/"pp"/"dp"/"cp"/"world", pg name -> how it was decided)."""
    groups = process_groups(job)
    kinds = _collective_kinds_by_group(job)
    world = job.world_size
    roles: dict[str, str] = {}
    how: dict[str, str] = {}
    for name, g in groups.items():
        role = _role_from_desc(g["desc"])
        if role:
            roles[name], how[name] = role, f"process group description {g['desc']!r}"
    for name, counts in kinds.items():
        if name in roles or name == "?":
            continue
        size = len(groups.get(name, {}).get("ranks", [])) or world
        total = sum(counts.values())
        p2p = sum(v for k, v in counts.items() if k in _P2P)
        if size == world:
            roles[name], how[name] = "world", "spans every rank"
        elif p2p * 2 > total:
            roles[name], how[name] = "pp", "mostly send/recv between pipeline stages"
        elif counts[CollectiveKind.ALL_REDUCE] > 4 * (
            counts[CollectiveKind.REDUCE_SCATTER] + counts[CollectiveKind.ALL_GATHER] + 1
        ):
            roles[name], how[name] = "tp", "many all-reduces (one per layer half)"
        else:
            roles[name], how[name] = "dp", "gradient reduce-scatter/all-gather"
    for name, g in groups.items():
        if name not in roles and len(g["ranks"]) == world:
            roles[name], how[name] = "world", "spans every rank"
    return roles, how


def _steps_per_rank(t: RankTrace) -> int:
    return max(1, len(t.iterations))


def _layer_annotations(job: Job) -> tuple[int | None, int | None, str]:
    """(layers, forward passes per layer per iteration, how) from forward-layer annotations."""
    indices: set[int] = set()
    per_iter: list[int] = []
    for t in job.ranks:
        names = {i: layer_index(s) for i, s in enumerate(t.strings)}
        ids = [i for i, v in names.items() if v is not None]
        if not ids:
            continue
        cpu = np.isin(t.kind, [Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.CPU_OP])
        rows = np.flatnonzero(cpu & np.isin(t.name, ids))
        local = {names[int(n)] for n in t.name[rows].tolist()}
        indices |= {v for v in local if v is not None}
        counts = collections.Counter(names[int(n)] for n in t.name[rows].tolist())
        if counts:
            per_iter.append(max(1, round(min(counts.values()) / _steps_per_rank(t))))
    if not indices:
        return None, None, ""
    return (
        max(indices) + 1,
        int(np.median(per_iter)) if per_iter else None,
        "forward-layer annotations (record_function / module names)",
    )


def _gemm_shapes(job: Job) -> collections.Counter:
    """(M, K, N) of recorded GEMM calls over all ranks (2-D view: tokens x in -> out)."""
    shapes: collections.Counter = collections.Counter()
    for t in job.ranks[:4]:
        ids = [i for i, s in enumerate(t.strings) if s in GEMM_OPS]
        if not ids:
            continue
        for ev in np.flatnonzero((t.kind == Kind.CPU_OP) & np.isin(t.name, ids))[:20000].tolist():
            dims = t.args_of(ev).get("Input Dims")
            shape = gemm_shape(t.name_of(ev), dims)
            if shape:
                shapes[shape] += 1
    return shapes


def gemm_shape(op: str, dims: Any) -> tuple[int, int, int] | None:
    """(M, K, N) of a GEMM op from its recorded input dims, or None.

    >>> gemm_shape("aten::mm", [[16384, 768], [768, 3072]])
    (16384, 768, 3072)
    >>> gemm_shape("aten::addmm", [[768], [512, 256], [256, 768], [], []])
    (512, 256, 768)
    >>> gemm_shape("aten::linear", [[4, 128, 256], [768, 256], [768]])
    (512, 256, 768)
    """
    if not isinstance(dims, list) or len(dims) < 2:
        return None
    try:
        if op == "aten::addmm" and len(dims) >= 3:
            a, b = dims[1], dims[2]
        elif op == "aten::linear":
            x, w = dims[0], dims[1]
            if len(w) != 2 or not x:
                return None
            m = int(np.prod(x[:-1])) if len(x) > 1 else 1
            return (m, int(x[-1]), int(w[0])) if x[-1] == w[1] else None
        else:
            a, b = dims[0], dims[1]
        if len(a) < 2 or len(b) < 2:
            return None
        m = int(np.prod(a[:-1]))
        k, k2, n = int(a[-1]), int(b[-2]), int(b[-1])
        return (m, k, n) if k == k2 and m > 0 and n > 0 else None
    except (TypeError, ValueError, IndexError):
        return None


def _model_from_shapes(shapes: collections.Counter) -> dict[str, tuple[int, str]]:
    """hidden, ffn and tokens per microbatch from forward GEMM shapes (M = tokens)."""
    if not shapes:
        return {}
    tokens = collections.Counter()
    for (m, _k, _n), c in shapes.items():
        tokens[m] += c
    tok = tokens.most_common(1)[0][0]
    fwd = {(k, n): c for (m, k, n), c in shapes.items() if m == tok}
    if not fwd:
        return {}
    ks = collections.Counter()
    for (k, _n), c in fwd.items():
        ks[k] += c
    hidden = ks.most_common(1)[0][0]
    out: dict[str, tuple[int, str]] = {
        "hidden": (hidden, "most common GEMM input width"),
        "tokens": (tok, "most common GEMM row count (tokens per microbatch)"),
    }
    # The FFN width is what the layers' GEMMs expand hidden to and contract back from; the LM head
    # does that too (hidden -> vocab, and back in its backward) but once, not once per layer.
    up = {
        n: c
        for (k, n), c in fwd.items()
        if k == hidden and hidden < n <= 16 * hidden and n not in (2 * hidden, 3 * hidden)
    }
    down = {k: c for (k, n), c in fwd.items() if n == hidden and hidden < k <= 16 * hidden}
    cands = {w: up[w] + down[w] for w in set(up) & set(down)} or down
    if cands:
        out["ffn"] = (max(cands, key=lambda w: (cands[w], -w)), "GEMM that maps hidden -> FFN -> hidden")
    return out


def infer_baseline(job: Job, overrides: dict[str, Any] | None = None) -> Baseline:
    """The job's configuration with provenance; ``overrides`` (user-given values) win."""
    fields: dict[str, Inferred] = {}
    notes: list[str] = []
    world = job.world_size
    roles, how = group_roles(job)
    groups = process_groups(job)
    by_role: dict[str, list[list[int]]] = collections.defaultdict(list)
    for name, role in roles.items():
        if name in groups:
            by_role[role].append(groups[name]["ranks"])
    size = {role: max((len(g) for g in gs), default=1) for role, gs in by_role.items()}
    tp = size.get("tp", 1)
    pp = size.get("pp", 1)
    cp = size.get("cp", 1)
    dp = size.get("dp", max(1, world // (tp * pp * cp)))
    if cp > 1 and tp * pp * dp == world:  # the largest data group was DP x CP (the gradients' group)
        dp //= cp
    if tp * pp * dp * cp != world:
        notes.append(f"group sizes TP {tp} x PP {pp} x DP {dp} x CP {cp} != world {world}; DP set to fit")
        dp = max(1, world // (tp * pp * cp))
    src = "process groups (pg_config / collective args)"
    fields["world_size"] = Inferred(
        world, "certain", "distributedInfo.world_size" if job.ranks[0].world_size else "rank files"
    )
    fields["tp"] = Inferred(
        tp,
        "inferred" if "tp" in size else "guess",
        how_for(roles, how, "tp") or f"no tensor-parallel group found in {src}",
    )
    fields["pp"] = Inferred(
        pp,
        "inferred" if "pp" in size else "guess",
        how_for(roles, how, "pp") or f"no pipeline group found in {src}",
    )
    fields["dp"] = Inferred(dp, "inferred", how_for(roles, how, "dp") or "world size / (TP x PP)")

    synth = _synth_config(job)
    layers, passes, layer_how = _layer_annotations(job)
    if synth:
        layers = int(synth["model"]["layers"])
        fields["layers"] = Inferred(layers, "certain", "recorded by lumos synth (lumos_synth_config)")
    elif layers is not None:
        layers = layers * (pp if _stage_local_layer_numbers(job, pp) else 1)
        fields["layers"] = Inferred(layers, "inferred", layer_how)
    else:
        found = layer_count_from_kernels(job.ranks[0]) if pp == 1 else None
        if found:
            fields["layers"] = Inferred(
                found,
                "inferred",
                "repeated kernel pattern of the forward and backward "
                "passes (no layer annotations; check it, or give --baseline-layers)",
            )
        else:
            fields["layers"] = Inferred(
                None, "unknown", "no layer annotations; give it with --baseline-layers"
            )
    microbatches = 1
    if synth:
        microbatches = int(synth["microbatches"])
        fields["microbatches"] = Inferred(microbatches, "certain", "recorded by lumos synth")
    else:
        chunks = _layer_chunks(job, pp)
        if chunks:
            fields["vp"] = Inferred(
                chunks, "inferred", f"each pipeline rank's layer annotations form {chunks} separate runs"
            )
        fwd_steps = _forward_step_count(job)
        if fwd_steps:
            microbatches = max(1, fwd_steps // (chunks or 1))  # interleaved: one forward_step per chunk
            fields["microbatches"] = Inferred(
                microbatches,
                "inferred",
                "forward_step annotations per iteration" + (f" / {chunks} model chunks" if chunks else ""),
            )
        elif passes:
            microbatches = passes
            fields["microbatches"] = Inferred(
                microbatches, "inferred", "forward passes of each layer per iteration"
            )
        else:
            fields["microbatches"] = Inferred(1, "guess", "no repeated forward passes found")
    model: dict[str, tuple[int, str]] = {}
    if synth:
        m = synth["model"]
        for k in ("hidden", "ffn", "heads", "seq"):
            model[k] = (int(m[k]), "recorded by lumos synth")
        model["micro_batch"] = (int(synth["micro_batch"]), "recorded by lumos synth")
        model["kv_heads"] = (int(m.get("kv_heads") or m["heads"]), "recorded by lumos synth")
        fields["mlp"] = Inferred("swiglu" if m.get("gated_ffn") else "gelu", "certain", "recorded by lumos synth")
        for k in ("recompute", "sp", "vp", "cp"):
            if k in synth:
                fields[k] = Inferred(synth[k], "certain", "recorded by lumos synth")
    else:
        gemms = _gemm_shapes(job)
        shapes = _model_from_shapes(gemms)
        for k in ("hidden", "ffn"):
            if k in shapes:
                v, h = shapes[k]
                model[k] = (v * (tp if k == "ffn" else 1), h)
        if "ffn" in shapes and "hidden" in shapes:
            fields["mlp"] = _mlp_kind(gemms, shapes["hidden"][0], shapes["ffn"][0])
        if "tokens" in shapes:
            fields["tokens"] = Inferred(shapes["tokens"][0], "inferred", shapes["tokens"][1])
        att = _attention_shape(job)
        if att:
            b, heads, seq, _, kv = att
            how = "scaled_dot_product_attention input [micro-batch, heads, seq, head dim]"
            model.update({"micro_batch": (b, how), "heads": (heads * tp, how), "seq": (seq, how)})
            model["kv_heads"] = (kv * tp, "scaled_dot_product_attention key input [b, KV heads, seq, d]")
        recompute = _recompute_in_backward(job)
        if recompute:
            fields["recompute"] = Inferred(recompute[0], "inferred", recompute[1])
        if tp > 1 and _tp_group_shards_sequence(job, roles):
            fields["sp"] = Inferred(True, "inferred", "reduce-scatter/all-gather on the TP group (no all-reduce)")
        vocab = _vocab(gemms, shapes)
        if vocab:
            fields["vocab"] = Inferred(
                vocab, "inferred", "widest GEMM output from the hidden size (the LM head)"
            )
    if "cp" in size and "cp" not in fields:
        fields["cp"] = Inferred(cp, "inferred", how_for(roles, how, "cp"))
    for k in ("recompute", "sp", "vp", "cp", "mlp"):  # not found in the trace: the knob's stated assumption
        if k not in fields:
            confidence, how_found = KNOB[k].assumed
            fields[k] = Inferred(KNOB[k].default, confidence, how_found)
    for k in ("hidden", "ffn", "heads", "kv_heads", "seq", "micro_batch"):
        if k in model:
            fields[k] = Inferred(model[k][0], "certain" if synth else "inferred", model[k][1])
        else:
            fields[k] = Inferred(None, "unknown", "not recorded in the trace; give it to change it")
    gpu_name = job.ranks[0].device_name
    try:
        gpu = get_gpu(gpu_name).name
        fields["gpu"] = Inferred(gpu, "certain", f"deviceProperties: {gpu_name}")
    except ConfigError:
        gpu = "H100"
        fields["gpu"] = Inferred(
            gpu, "guess", f"device {gpu_name!r} is not a known GPU profile; H100 assumed"
        )
    config = JobConfig(
        dp=dp,
        tp=tp,
        pp=pp,
        microbatches=microbatches,
        layers=fields["layers"].value,
        hidden=fields["hidden"].value,
        ffn=fields["ffn"].value,
        heads=fields["heads"].value,
        seq=fields["seq"].value,
        micro_batch=fields["micro_batch"].value,
        gpu=gpu,
        kv_heads=fields["kv_heads"].value,
        **{k: fields[k].value for k in ("recompute", "sp", "vp", "cp", "mlp") if k in fields},
    )
    if overrides:
        config = config.with_changes(**overrides)
        for k, v in overrides.items():
            if v is not None:
                fields[k] = Inferred(v, "given", "given by the user")
    return Baseline(
        config=config, fields=fields, groups={r: sorted(g) for r, g in by_role.items()}, notes=notes
    )


def _mlp_kind(shapes: collections.Counter, hidden: int, ffn_shard: int) -> Inferred:
    """SwiGLU when the layers' GEMMs widen hidden to twice the FFN shard (fused gate+up) and never to
    the FFN shard itself; GeLU when they widen it to the FFN shard."""
    widths = {n for (_m, k, n) in shapes if k == hidden}
    if 2 * ffn_shard in widths and ffn_shard not in widths:
        return Inferred("swiglu", "inferred", "a hidden -> 2 x FFN GEMM (fused gate and up projections)")
    if ffn_shard in widths:
        return Inferred("gelu", "inferred", "a hidden -> FFN GEMM (one up projection)")
    return Inferred("gelu", *KNOB["mlp"].assumed)


def _recompute_in_backward(job: Job) -> tuple[str, str] | None:
    """("full" | "selective", how) when the trace re-runs forward work inside its backward pass:
    Megatron's/PyTorch's checkpointing (``CheckpointFunction``) or ``recompute.`` annotations."""
    for t in job.ranks[:2]:
        names = [s for s in t.strings if s.startswith("recompute.") or "CheckpointFunction" in s]
        if any("core_attention" in s for s in names):
            return "selective", "recomputed attention-core annotations in the backward pass"
        if names:
            return "full", f"recomputed forward in the backward pass ({names[0]!r})"
    return None


def _tp_group_shards_sequence(job: Job, roles: dict[str, str]) -> bool:
    """Sequence parallelism: the TP group reduce-scatters and all-gathers, never all-reduces."""
    kinds = _collective_kinds_by_group(job)
    tp = [kinds[n] for n, r in roles.items() if r == "tp" and n in kinds]
    return bool(tp) and all(
        c[CollectiveKind.ALL_REDUCE] == 0 and c[CollectiveKind.REDUCE_SCATTER] and c[CollectiveKind.ALL_GATHER]
        for c in tp
    )


def _attention_shape(job: Job) -> tuple[int, int, int, int, int] | None:
    """(micro-batch, heads per rank, seq, head dim, KV heads per rank) from recorded attention inputs
    [b, h, s, d] (query, then key)."""
    for t in job.ranks[:2]:
        ids = [
            i
            for i, s in enumerate(t.strings)
            if "scaled_dot_product" in s and "backward" not in s.lower() and not s.startswith("autograd")
        ]
        rows = np.flatnonzero((t.kind == Kind.CPU_OP) & np.isin(t.name, ids))[:50]
        for ev in rows.tolist():
            dims = t.args_of(ev).get("Input Dims")
            if isinstance(dims, list) and dims and isinstance(dims[0], list) and len(dims[0]) == 4:
                b, h, s, d = (int(x) for x in dims[0])
                k = dims[1] if len(dims) > 1 and isinstance(dims[1], list) and len(dims[1]) == 4 else dims[0]
                kv = int(k[1]) if int(k[1]) > 0 and h % int(k[1]) == 0 else h
                if min(b, h, s, d) > 0:
                    return b, h, s, d, kv
    return None


def _vocab(shapes: collections.Counter, model: dict[str, tuple[int, str]]) -> int | None:
    if "hidden" not in model or "tokens" not in model:
        return None
    h, tok = model["hidden"][0], model["tokens"][0]
    ffn = model.get("ffn", (0, ""))[0]
    wide = [n for (m, k, n) in shapes if m == tok and k == h and n > max(ffn, 3 * h)]
    return max(wide) if wide else None


def how_for(roles: dict[str, str], how: dict[str, str], role: str) -> str:
    names = [n for n, r in roles.items() if r == role]
    return f"{how[names[0]]} (group {names[0]!r})" if names else ""


def _synth_config(job: Job) -> dict[str, Any] | None:
    cfg = job.ranks[0].metadata.get("lumos_synth_config")
    return cfg if isinstance(cfg, dict) and isinstance(cfg.get("model"), dict) else None


def _forward_step_count(job: Job) -> int | None:
    t = job.ranks[0]
    ids = [i for i, s in enumerate(t.strings) if s.startswith("forward_step#")]
    if not ids:
        return None
    n = int(np.count_nonzero((t.kind == Kind.USER_ANNOTATION) & np.isin(t.name, ids)))
    return max(1, round(n / _steps_per_rank(t)))


def _layer_chunks(job: Job, pp: int) -> int | None:
    """Model chunks per rank of an interleaved pipeline (> 1), from globally numbered layer
    annotations: every rank's layers form that many separate runs (2 stages x 2 chunks of 8 layers:
    stage 0 runs layers 0-1 and 4-5). None when the ranks disagree or hold one run each."""
    if pp <= 1:
        return None
    runs = set()
    for t in job.ranks:
        idx = sorted({v for v in map(layer_index, t.strings) if v is not None})
        if idx:
            runs.add(1 + sum(1 for a, b in zip(idx, idx[1:]) if b != a + 1))
    return runs.pop() if len(runs) == 1 and min(runs) > 1 else None


def _stage_local_layer_numbers(job: Job, pp: int) -> bool:
    """True when every pipeline stage numbers its layers from 0 (then the job has pp times more)."""
    if pp <= 1:
        return False
    firsts = []
    for t in job.ranks:
        idx = [layer_index(s) for s in t.strings]
        vals = [v for v in idx if v is not None]
        if vals:
            firsts.append(min(vals))
    return bool(firsts) and max(firsts) == 0
