"""``lumos diff``: torch.compile's renumbering is no change, and changes smaller than the runs' own
iteration spread are marked as noise (CLI and --json)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import needs_shared, shared
from tracegen import TraceBuilder

from lumos_core.commands.diff import format_diff
from lumos_core.compare.canonical import canonical_name, search_text
from lumos_core.compare.diff import diff_jobs
from lumos_core.trace.loader import load_job


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Torch-Compiled Region: 5/0", "Torch-Compiled Region: #/#"),
        ("Torch-Compiled Region: 12/3", "Torch-Compiled Region: #/#"),
        ("CompiledFunction 5/0", "CompiledFunction #/#"),
        (
            "## Call CompiledFxGraph fmjx4tvj25tlcyxxmna3xt44w27tefxwu7od5452pxewt4uhxb2u ##",
            "## Call CompiledFxGraph # ##",
        ),
        ("triton_poi_fused__to_copy_t_8", "triton_poi_fused__to_copy_t_#"),
        ("triton_red_fused_sum_12.kd", "triton_red_fused_sum_#.kd"),
        # not torch.compile's numbers: kept
        ("aten::mm", "aten::mm"),
        ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
        (
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        ),
        ("CompiledFunctionBackward", "CompiledFunctionBackward"),
    ],
)
def test_canonical_names(raw: str, canonical: str) -> None:
    assert canonical_name(raw) == canonical
    assert search_text(canonical_name(raw)) in raw  # what the app searches the raw names with


def _job(folder: Path, region: str, triton: str, its_us: list[float], extra_us: float = 0.0) -> Path:
    """One rank: per iteration a compiled region launching a Triton kernel and a GEMM."""
    b = TraceBuilder(rank=0, world=1)
    t0 = 0.0
    for k, it in enumerate(its_us):
        b.step(k + 1, t0, it - 10)
        b.cpu(region, t0 + 1, 30)
        b.launch(triton, t0 + 2, 3, kts=t0 + 10, kdur=300)
        b.launch("ampere_sgemm_128x64_tn", t0 + 6, 3, kts=t0 + 400, kdur=800 + extra_us)
        t0 += it
    folder.mkdir(parents=True)
    b.write(folder / "rank0.json")
    return folder


def test_a_recompiled_job_with_renumbered_regions_shows_no_change(tmp_path: Path) -> None:
    its = [2000.0, 2100.0, 1900.0, 2000.0, 2000.0]
    a = load_job(
        _job(tmp_path / "a", "Torch-Compiled Region: 5/0", "triton_poi_fused_add_3", its), use_cache=False
    )
    b = load_job(
        _job(tmp_path / "b", "Torch-Compiled Region: 8/0", "triton_poi_fused_add_7", its), use_cache=False
    )
    d = diff_jobs(a, b).as_dict()
    assert d["appeared"] == d["vanished"] == 0
    assert all(r["status"] == "both" and r["delta_us"] == 0 for r in d["kernels"])
    assert [r["name"] for r in d["cpu_ops"] if "Region" in r["name"]] == ["Torch-Compiled Region: #/#"]


def test_changes_smaller_than_the_iteration_spread_are_marked(tmp_path: Path) -> None:
    # steady iterations 2000, 2100, 1900, 2000 µs: standard deviation 82 µs in both jobs
    its = [2000.0, 2100.0, 1900.0, 2000.0, 2000.0]
    base = load_job(_job(tmp_path / "a", "r", "triton_poi_fused_add_1", its), use_cache=False)
    small = load_job(_job(tmp_path / "s", "r", "triton_poi_fused_add_1", its, extra_us=40.0), use_cache=False)
    big = load_job(_job(tmp_path / "g", "r", "triton_poi_fused_add_1", its, extra_us=400.0), use_cache=False)
    ds = diff_jobs(base, small)
    d = ds.as_dict()
    assert d["noise"]["spread_us"] == pytest.approx(81.65, abs=0.5)
    assert d["noise"]["a"]["iterations"] == 4 and d["noise"]["a"]["min_us"] == pytest.approx(1900, abs=1)
    gemm = next(r for r in d["kernels"] if r["kernel"].startswith("ampere"))
    assert gemm["delta_us"] == pytest.approx(40, abs=1) and gemm["within_noise"]
    text = format_diff(ds)
    assert "noise: ±0.082 ms" in text and "~ ampere_sgemm" in text
    gemm = next(r for r in diff_jobs(base, big).as_dict()["kernels"] if r["kernel"].startswith("ampere"))
    assert gemm["delta_us"] == pytest.approx(400, abs=1) and not gemm["within_noise"]


def test_one_iteration_gives_no_spread_and_marks_nothing(tmp_path: Path) -> None:
    a = load_job(_job(tmp_path / "a", "r", "k", [2000.0]), use_cache=False)
    d = diff_jobs(a, a).as_dict()
    assert d["noise"]["spread_us"] is None
    assert not any(r["within_noise"] for r in d["kernels"])
    assert "noise: unknown" in format_diff(diff_jobs(a, a))


@needs_shared
def test_nanogpt_with_itself_is_all_within_its_spread() -> None:
    job = load_job(shared("h100-nanogpt-8rank"))
    d = diff_jobs(job, job).as_dict()
    assert d["noise"]["spread_us"] > 100  # real steps vary (41 ms steps, ms of spread)
    assert d["iteration_within_noise"] and all(r["within_noise"] for r in d["families"])
    assert not any("Region: 5" in r["name"] for r in d["cpu_ops"])


@needs_shared
def test_nanogpt_recompiled_with_renumbered_regions_is_no_change(tmp_path: Path) -> None:
    """Two ranks of the real nanoGPT job against the same traces as a recompile writes them: every
    torch.compile region renumbered (5/0 -> 8/0), every Triton kernel index shifted, every
    CompiledFxGraph hash new. Nothing may appear or vanish, and no row may change."""
    import gzip
    import re

    import orjson

    files = sorted(shared("h100-nanogpt-8rank").glob("*rank[01]-*.json.gz"))
    assert len(files) == 2
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    region = re.compile(r"(Torch-Compiled Region: )(\d+)/")
    triton = re.compile(r"^(triton_\w+?_)(\d+)$")
    graph = re.compile(r"(CompiledFxGraph )(\w+)")
    renamed = 0
    for f in files:
        (tmp_path / "a" / f.name).symlink_to(f)
        doc = orjson.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            name = e.get("name")
            if isinstance(name, str):
                new = region.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + 3}/", name)
                new = triton.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + 7}", new)
                new = graph.sub(lambda m: f"{m.group(1)}{m.group(2)[::-1]}", new)
                renamed += new != name
                e["name"] = new
        (tmp_path / "b" / f.name).write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
    assert renamed > 1000
    a = load_job(tmp_path / "a", use_cache=False, workers=1)
    b = load_job(tmp_path / "b", use_cache=False, workers=1)
    d = diff_jobs(a, b).as_dict()
    assert d["appeared"] == d["vanished"] == 0
    assert all(r["delta_us"] == 0 for r in d["kernels"] + d["cpu_ops"])
