"""Published training runs against Lumos's trace-free prediction, beside null models.

Every row of a shared table (../shared/ground-truth, read in place) becomes a ``SynthConfig`` and
is predicted by :func:`lumos_core.synth.predict.predict`: the same cost models as ``lumos synth``
(per-layer kernels, TP/SP collectives, pipeline schedule with interleaving, p2p, DP reduction,
optimizer, host time per operator) with the GPU profile's priors. Per table it prints the mean
|absolute error| of the iteration time beside the null model "constant 45 % of peak" (Narayanan
Eq. 3 FLOPs, recomputation counted, at 0.45 x peak); per knob the mean |ratio error| beside
"no change" (ratio 1). Every figure is labelled in-sample or hold-out.

The split (stated, fixed):

* FIT: Korthikanti Table 4 (one 22B layer: forward, backward, recomputation times) and a seeded
  half of vTrain's 1,440 single-node runs (row index hash even). The A100 priors in
  lumos_core/perf/hardware.py (gemm_efficiency, gemm_fixed, attention_efficiency, host_scale)
  are the result of ``--fit`` on this part. The NCCL priors were fitted on Echo's nccl-tests.
* HOLD-OUT: the other half of vTrain, Narayanan Table 1 (32-3,072 GPUs), Narayanan Table 2
  PTD-P rows (384-2,240 GPUs), Korthikanti Tables 3/5 (8-512 GPUs, both settings).
* Leave-one-table-out (``--loto``): refit on every table but one, score that table.

Settings assumed per table (the papers do not list all of them): sequence 2048, vocabulary 51,200,
Megatron's unfused attention (2021-22 code) on A100; Narayanan T1: full recomputation, 1F1B without
interleaving, micro-batch 1 when pipelined, else 4 (unstated); T2: micro-batch 1 (stated); Korthikanti
T3/5: the table's micro-batch and interleaving, "full" = full recomputation without SP, the other
column = SP + selective; vTrain: full recomputation (``use_checkpoint``), 1F1B, one gradient bucket
(no bucketing: the all-reduce is exposed), blocking pipeline send/recv (Megatron-DeepSpeed runs its
pipelines with DeepSpeed's engine, whose p2p calls hold the CPU), and the CPU waiting for the GPU at each
checkpointed layer boundary (``layer_sync``: DeepSpeed's activation checkpointing; without it, rows where
host and GPU time are of a size come out 10-20 % too fast and the hidden/micro-batch ratios miss by 13-14 %). Excluded, with reason: Narayanan T2 ZeRO-3 rows (no
ZeRO-3 model); Megatron-Bridge's table (every row is an MoE model with expert parallelism in
MXFP8/NVFP4 on GB200/GB300: no MoE, FP8 or Blackwell-Ultra profile here; no H100 dense row).

Usage: .venv/bin/python bench/bench_published.py [--fit] [--loto] [--vtrain-rows N]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from common import REPO

from lumos_core.perf.costs import peak_flops
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.synth.flops import iteration_flops
from lumos_core.synth.models import ModelSpec, SynthConfig
from lumos_core.synth.predict import layer_times, predict

GT = (REPO.parent / "shared" / "ground-truth").resolve()
NULL_EFF = 0.45
TARGET_ABS, TARGET_TABLE, TARGET_RATIO = 0.10, 0.15, 0.10


@dataclass
class Row:
    table: str
    key: str
    cfg: SynthConfig
    measured: float  # seconds per iteration
    fit: bool  # in the fit part
    group: str = ""  # knob pairs: rows differing in one knob share (knob, rest of the config)
    layer: str = ""  # "fwd"/"bwd" for layer-timing rows


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048) -> ModelSpec:
    return ModelSpec(name, layers, hidden, 4 * hidden, heads, seq)


def _cfg(model: ModelSpec, **kw) -> SynthConfig:
    kw.setdefault("gpu", "A100")
    kw.setdefault("attention", "unfused")
    return SynthConfig(model=model, **kw)


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def load_rows() -> list[Row]:
    rows: list[Row] = []
    papers = GT / "papers"
    for r in _read(papers / "narayanan_sc21_table1_weak_scaling.csv"):
        tp, pp, n = int(r["tp"]), int(r["pp"]), int(r["n_gpus"])
        dp, gb = n // (tp * pp), int(r["global_batch"])
        mb = 1 if pp > 1 else 4
        m = _gpt(f"{r['params_B']}B", int(r["num_layers"]), int(r["hidden_size"]), int(r["attention_heads"]))
        cfg = _cfg(m, tp=tp, pp=pp, dp=dp, micro_batch=mb, microbatches=gb // (mb * dp), recompute="full")
        rows.append(Row("narayanan_t1", r["params_B"], cfg, float(r["derived_iter_time_s_eq3"]), False))
    for r in _read(papers / "narayanan_sc21_table2_ptdp_vs_zero3.csv"):
        if r["scheme"] != "PTD-P":
            continue
        layers, hidden = int(r["num_layers_assumed"]), int(r["hidden_assumed"])
        mp, n, gb = int(r["model_parallel_size_tp_x_pp"]), int(r["n_gpus"]), int(r["global_batch"])
        tp, pp, dp = 8, mp // 8, n // mp
        m = _gpt(f"{r['params_B']}B", layers, hidden, hidden // 128)
        cfg = _cfg(m, tp=tp, pp=pp, dp=dp, micro_batch=1, microbatches=gb // dp, recompute="full")
        rows.append(
            Row(
                "narayanan_t2",
                f"{r['params_B']}B/{n}",
                cfg,
                float(r["derived_iter_time_s_eq3"]),
                False,
                group=f"gpus|{r['params_B']}",
            )
        )
    for r in _read(papers / "korthikanti22_table3_table5_e2e.csv"):
        tp, pp, n, gb, mb = (int(r[k]) for k in ("tp", "pp", "n_gpus", "global_batch", "micro_batch"))
        dp, vp = n // (tp * pp), int(r["interleave_stages"])
        m = _gpt(r["model"], int(r["num_layers"]), int(r["hidden_size"]), int(r["attention_heads"]))
        base = {"tp": tp, "pp": pp, "dp": dp, "micro_batch": mb, "microbatches": gb // (mb * dp), "vp": vp}
        rows.append(
            Row(
                "korthikanti_t3t5",
                f"{r['model']}/full",
                _cfg(m, recompute="full", **base),
                float(r["iter_time_full_recompute_s"]),
                False,
                group=f"recompute|{r['model']}",
            )
        )
        rows.append(
            Row(
                "korthikanti_t3t5",
                f"{r['model']}/sp+sel",
                _cfg(m, recompute="selective", sp=True, **base),
                float(r["iter_time_seqpar_selective_s"]),
                False,
                group=f"recompute|{r['model']}",
            )
        )
    m22 = _gpt("22B", 48, 6144, 64)
    t4 = {
        "baseline_no_recompute": {"recompute": "none"},
        "sequence_parallel": {"recompute": "none", "sp": True},
        "full_recompute": {"recompute": "full"},
        "selective_recompute": {"recompute": "selective"},
        "selective_recompute+sequence_parallel": {"recompute": "selective", "sp": True},
    }
    for r in _read(papers / "korthikanti22_table4_layer_timing_22B.csv"):
        cfg = _cfg(m22, tp=8, pp=1, dp=1, micro_batch=4, microbatches=1, **t4[r["experiment"]])
        for part in ("fwd", "bwd"):
            ms = float(r["forward_ms" if part == "fwd" else "backward_ms"])
            rows.append(
                Row(
                    "korthikanti_t4",
                    f"{r['experiment']}/{part}",
                    cfg,
                    ms / 1e3,
                    True,
                    group=f"layer_recompute|{part}",
                    layer=part,
                )
            )
    with open(GT / "vtrain" / "ground_truth_single.csv", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        next(reader)
        for i, r in enumerate(reader):
            n, gb, mb, h, heads, layers, seq, tp, dp, pp = (int(x) for x in r[:10])
            m = ModelSpec(f"gpt-h{h}-l{layers}", layers, h, 4 * h, heads, seq)
            cfg = _cfg(
                m,
                tp=tp,
                pp=pp,
                dp=dp,
                micro_batch=mb,
                microbatches=gb // (mb * dp),
                recompute="full",
                bucket_params=10**12,
                p2p_blocks_cpu=True,
                layer_sync=True,
            )
            fit = zlib.crc32(f"vtrain{i}".encode()) % 2 == 0
            rest = f"{n}|{gb}|{layers}|{tp}|{dp}|{pp}"
            rows.append(Row("vtrain", str(i), cfg, float(r[10]) / 1e3, fit, group=f"{h}|{mb}|{rest}"))
    return rows


def predicted(row: Row, gpu: GpuProfile) -> float:
    if row.layer:
        fwd, bwd = layer_times(row.cfg, gpu)
        return fwd if row.layer == "fwd" else bwd
    return predict(row.cfg, gpu).iteration_s


def null_45(row: Row) -> float:
    """Constant 45 % of peak on Narayanan's Eq. 3 FLOPs (recomputation counted)."""
    cfg = row.cfg
    peak = peak_flops(get_gpu(cfg.gpu)) * NULL_EFF
    if row.layer:  # one layer on its TP group: forward 1x, backward 2x (+1x recomputed)
        m = cfg.model
        tokens = cfg.micro_batch * m.seq
        fwd = (24.0 * tokens * m.hidden**2 + 4.0 * tokens * m.seq * m.hidden) / cfg.tp
        extra = {"full": 1.0, "selective": 4.0 * tokens * m.seq * m.hidden / cfg.tp / fwd, "none": 0.0}
        return fwd / peak if row.layer == "fwd" else (2.0 + extra[cfg.recompute]) * fwd / peak
    return iteration_flops(cfg.model, cfg.global_batch, cfg.recompute) / (cfg.world_size * peak)


def _err(p: float, m: float) -> float:
    return abs(p / m - 1.0)


# ----------------------------------------------------------------------------------------- fit

PARAMS = {  # A100 prior: name -> candidate multipliers around the current value
    "gemm_efficiency": (0.8, 0.9, 0.95, 1.05, 1.1, 1.2),
    "attention_efficiency": (0.6, 0.8, 0.9, 1.1, 1.25, 1.5),
    "gemm_fixed": (0.25, 0.5, 0.75, 1.5, 2.0, 4.0),
    "host_scale": (0.5, 0.7, 0.85, 1.15, 1.3, 2.0, 4.0, 8.0),
}
# Physical bounds: a GEMM's fixed cost is a partial wave and an epilogue (a few to ~20 us), not
# host time, which ``host_scale`` carries.
BOUNDS = {"gemm_fixed": (1e-6, 20e-6), "host_scale": (0.25, 16.0)}


def start_profile() -> GpuProfile:
    """Where every fit starts: the A100 profile's pre-fit (datasheet-derived) values, so a fit never
    starts from numbers that already saw the data (the leave-one-table-out figure depends on it)."""
    return replace(
        get_gpu("A100"), gemm_efficiency=0.75, attention_efficiency=0.55, gemm_fixed=4e-6, host_scale=1.0
    )


def _score(rows: list[Row], gpu: GpuProfile) -> float:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.table, []).append(_err(predicted(r, gpu), r.measured))
    return statistics.fmean(statistics.fmean(v) for v in by.values())  # tables count alike


def fit(rows: list[Row], gpu: GpuProfile, passes: int = 2, log: Callable[[str], None] = print) -> GpuProfile:
    """Coordinate descent of the four physical priors on ``rows`` (mean of per-table errors)."""
    best = _score(rows, gpu)
    for _ in range(passes):
        for name, mults in PARAMS.items():
            base = getattr(gpu, name)
            for k in mults:
                val = min(base * k, 1.0) if "efficiency" in name else base * k
                lo, hi = BOUNDS.get(name, (0.0, float("inf")))
                val = min(max(val, lo), hi)
                cand = replace(gpu, **{name: val})
                s = _score(rows, cand)
                if s < best - 1e-4:
                    best, gpu = s, cand
        log(
            f"  fit pass: gemm_eff {gpu.gemm_efficiency:.3f} attn_eff {gpu.attention_efficiency:.3f} "
            f"gemm_fixed {gpu.gemm_fixed * 1e6:.1f} us host_scale {gpu.host_scale:.2f} -> {100 * best:.1f} %"
        )
    return gpu


def _subsample(rows: list[Row], n: int) -> list[Row]:
    out, seen = [], {}
    for r in rows:
        seen[r.table] = seen.get(r.table, 0) + 1
        if r.table != "vtrain" or seen[r.table] <= n:
            out.append(r)
    return out


# --------------------------------------------------------------------------------- noise floor


def vtrain_noise_floor(rows: list[Row]) -> tuple[float, float]:
    """(run-to-run noise, a perfect model's mean |ratio error|) of vTrain's iteration times, from the
    data alone. Every configuration was run at 12, 16, 20 and 24 layers; the iteration time of a
    fixed configuration is affine in the layer count (per-layer work and, per stage, L/pp layers
    in every 1F1B slot; embedding, head, optimizer constants), so what a line through the four
    runs leaves is run-to-run noise. Returned: its relative standard deviation (residual sum of
    squares over 4 - 2 degrees of freedom per line, pooled), and E|r - 1| of a ratio of two runs
    with that noise each, sqrt(2) sigma sqrt(2 / pi): the mean ratio error of a model that is exact."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.table == "vtrain":
            c = r.cfg
            key = f"{c.model.hidden}|{c.micro_batch}|{c.global_batch}|{c.tp}|{c.dp}|{c.pp}"
            lines.setdefault(key, []).append((c.model.layers, r.measured))
    ss, dof = 0.0, 0
    for pts in lines.values():
        if len(pts) < 3:
            continue
        n = len(pts)
        mx = statistics.fmean(x for x, _ in pts)
        my = statistics.fmean(y for _, y in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        ss += sum(((y - my - slope * (x - mx)) / y) ** 2 for x, y in pts)
        dof += n - 2
    sigma = (ss / dof) ** 0.5 if dof else float("nan")
    return sigma, sigma * 2**0.5 * (2 / 3.141592653589793) ** 0.5


# -------------------------------------------------------------------------------------- report


def _ratios(rows: list[Row], pred: dict[int, float]) -> dict[str, list[tuple[float, float, bool]]]:
    """(knob) -> [(predicted ratio, measured ratio, in-sample)] over pairs that differ in one knob."""
    out: dict[str, list[tuple[float, float, bool]]] = {}
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.table == "vtrain":  # hidden-size pairs and micro-batch pairs
            h, mb, rest = r.group.split("|", 2)
            groups.setdefault(f"vtrain hidden 1024->2048|{mb}|{rest}", []).append(i)
            groups.setdefault(f"vtrain micro-batch x2|{h}|{rest}", []).append(i)
        elif r.group:
            groups.setdefault(r.group, []).append(i)
    for key, idx in groups.items():
        knob = key.split("|")[0]
        if len(idx) < 2:
            continue
        rs = [rows[i] for i in idx]
        if knob.startswith("vtrain hidden"):
            a = [i for i in idx if rows[i].cfg.model.hidden == 1024]
            b = [i for i in idx if rows[i].cfg.model.hidden == 2048]
            pairs = [(x, y) for x in a for y in b]
        elif knob.startswith("vtrain micro"):
            pairs = [
                (x, y) for x in idx for y in idx if rows[y].cfg.micro_batch == 2 * rows[x].cfg.micro_batch
            ]
        else:
            base = idx[0]
            pairs = [(base, y) for y in idx[1:]]
        for x, y in pairs:
            pr = pred[y] / pred[x]
            mr = rows[y].measured / rows[x].measured
            out.setdefault(
                knob if "vtrain" in knob else knob.replace("layer_recompute", "layer recompute/sp (T4)"), []
            ).append((pr, mr, rows[x].fit and rows[y].fit))
        del rs
    return out


def report(rows: list[Row], gpu_for: Callable[[Row], GpuProfile]) -> dict[str, dict[str, float]]:
    pred = {i: predicted(r, gpu_for(r)) for i, r in enumerate(rows)}
    print(
        f"\n{'table':<18}{'part':<10}{'rows':>5}{'lumos |err|':>13}{'null 45% |err|':>16}{'max |err|':>11}  verdict"
    )
    summary: dict[str, dict[str, float]] = {}
    for table in dict.fromkeys(r.table for r in rows):
        for part in ("in-sample", "hold-out"):
            idx = [i for i, r in enumerate(rows) if r.table == table and (r.fit == (part == "in-sample"))]
            if not idx:
                continue
            e = [_err(pred[i], rows[i].measured) for i in idx]
            n = [_err(null_45(rows[i]), rows[i].measured) for i in idx]
            me, mn = statistics.fmean(e), statistics.fmean(n)
            verdict = ""
            if part == "hold-out":
                ok = me <= TARGET_TABLE and me < mn
                verdict = "meets <=15 % and beats null" if ok else "MISSES target"
            print(
                f"{table:<18}{part:<10}{len(idx):>5}{100 * me:>12.1f}%{100 * mn:>15.1f}%{100 * max(e):>10.1f}%  {verdict}"
            )
            summary[f"{table}/{part}"] = {"lumos": me, "null": mn, "n": len(idx)}
    ho = [i for i, r in enumerate(rows) if not r.fit]
    tables_ho = [v["lumos"] for k, v in summary.items() if k.endswith("hold-out")]
    nulls_ho = [v["null"] for k, v in summary.items() if k.endswith("hold-out")]
    print(
        f"hold-out overall (mean of per-table means): lumos {100 * statistics.fmean(tables_ho):.1f} % vs null "
        f"{100 * statistics.fmean(nulls_ho):.1f} % (target <= {100 * TARGET_ABS:.0f} %); rows pooled: "
        f"{100 * statistics.fmean(_err(pred[i], rows[i].measured) for i in ho):.1f} %"
    )
    sigma, floor = vtrain_noise_floor(rows)
    print(
        f"vTrain noise floor (lines through 12/16/20/24 layers): run-to-run sigma {100 * sigma:.2f} %; "
        f"an exact model's mean |ratio error| {100 * floor:.2f} %"
    )
    print(f"\n{'knob (ratio)':<34}{'part':<10}{'pairs':>6}{'lumos |err|':>13}{'no-change |err|':>17}")
    for knob, vals in _ratios(rows, pred).items():
        for part in ("in-sample", "hold-out"):
            v = [(p, m) for p, m, ins in vals if ins == (part == "in-sample")]
            if not v:
                continue
            le = statistics.fmean(abs(p / m - 1) for p, m in v)
            ne = statistics.fmean(abs(1 / m - 1) for _, m in v)
            print(f"{knob:<34}{part:<10}{len(v):>6}{100 * le:>12.1f}%{100 * ne:>16.1f}%")
            summary[f"ratio {knob}/{part}"] = {"lumos": le, "null": ne, "n": len(v)}
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--fit", action="store_true", help="refit the A100 priors on the fit part and report with them"
    )
    ap.add_argument("--loto", action="store_true", help="leave-one-table-out refits (a few minutes)")
    ap.add_argument("--vtrain-rows", type=int, default=160, help="vTrain rows used per fit (subsample)")
    args = ap.parse_args()
    if not GT.is_dir():
        print(f"skipped: {GT} is absent")
        return 0
    t0 = time.perf_counter()
    rows = load_rows()
    a100 = get_gpu("A100")
    print(
        f"{len(rows)} published rows; fit part {sum(r.fit for r in rows)}, hold-out {sum(not r.fit for r in rows)}"
    )
    if args.fit:
        a100 = fit(_subsample([r for r in rows if r.fit], args.vtrain_rows), start_profile())
    print(
        f"A100 priors: gemm_efficiency {a100.gemm_efficiency:.3f}, attention_efficiency "
        f"{a100.attention_efficiency:.3f}, gemm_fixed {a100.gemm_fixed * 1e6:.1f} us, host_scale {a100.host_scale:.2f}"
    )
    report(rows, lambda r: a100)
    if args.loto:
        print("\nleave-one-table-out (refit without the table, score all its rows: hold-out by construction)")
        for table in dict.fromkeys(r.table for r in rows):
            train = _subsample([r for r in rows if r.table != table], args.vtrain_rows)
            g = fit(train, start_profile(), log=lambda s: None)
            test = [r for r in rows if r.table == table]
            e = statistics.fmean(_err(predicted(r, g), r.measured) for r in test)
            n = statistics.fmean(_err(null_45(r), r.measured) for r in test)
            print(
                f"  {table:<18} lumos {100 * e:5.1f} %   null 45 % {100 * n:5.1f} %   ({len(test)} rows; refit: "
                f"gemm {g.gemm_efficiency:.3f} + {g.gemm_fixed * 1e6:.0f} us, attn {g.attention_efficiency:.2f}, "
                f"host x{g.host_scale:.1f})"
            )
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
