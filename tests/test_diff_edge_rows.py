"""``lumos diff`` on rows the noise mark and the bus bandwidth must not misread: what only one job
ran (a kernel that appeared or vanished, a family one side lacks) is a change, never noise, however
small beside the runs' iteration spread; a collective whose size the trace does not record has no
bus bandwidth (not 0 GB/s) and an unknown group size prints as '?' (not -1)."""

from __future__ import annotations

from pathlib import Path

from tracegen import TraceBuilder

from lumos_core.commands.diff import format_diff
from lumos_core.compare.diff import diff_jobs
from lumos_core.trace.loader import load_job

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _job(folder: Path, extra: str | None) -> Path:
    """Steps of 2000/2100/1900/2000/2000 µs (spread ~82 µs): a GEMM, an NCCL kernel without
    collective args (older PyTorch: no size, no group) and, in B, a 5 µs kernel A never ran."""
    b = TraceBuilder(rank=0, world=1)
    t0 = 0.0
    for k, it in enumerate([2000.0, 2100.0, 1900.0, 2000.0, 2000.0]):
        b.step(k + 1, t0, it - 10)
        b.launch("ampere_sgemm_128x64_tn", t0 + 2, 3, kts=t0 + 10, kdur=800)
        b.launch(NCCL, t0 + 6, 3, kts=t0 + 900, kdur=200, stream=20)
        if extra:
            b.launch(extra, t0 + 12, 3, kts=t0 + 1200, kdur=5)
        t0 += it
    folder.mkdir(parents=True)
    b.write(folder / "rank0.json")
    return folder


def test_appeared_rows_are_never_within_noise(tmp_path: Path) -> None:
    a = load_job(_job(tmp_path / "a", None), use_cache=False)
    b = load_job(_job(tmp_path / "b", "my_tiny_new_kernel"), use_cache=False)
    diff = diff_jobs(a, b)
    d = diff.as_dict()
    assert d["noise"]["spread_us"] > 50  # the 5 µs kernel is far below the spread
    new = next(r for r in d["kernels"] if r["kernel"].startswith("my_tiny_new_kernel"))
    assert new["status"] == "appeared" and abs(new["delta_us"]) < 50
    assert not new["within_noise"]
    one_sided = [r for r in d["families"] if (r["a_count"] > 0) != (r["b_count"] > 0)]
    assert one_sided and not any(r["within_noise"] for r in one_sided)
    gemm = next(r for r in d["kernels"] if r["kernel"].startswith("ampere"))
    assert gemm["within_noise"]  # both ran it, unchanged: still marked
    text = format_diff(diff)
    assert "~ my_tiny_new_kernel" not in text and "my_tiny_new_kernel" in text


def test_collective_without_size_has_no_bus_bandwidth(tmp_path: Path) -> None:
    a = load_job(_job(tmp_path / "a", None), use_cache=False)
    diff = diff_jobs(a, a)
    rows = diff.as_dict()["collectives"]
    assert rows and all(r["size_bytes"] < 0 for r in rows)
    assert all(r["a_bus_bw_gbps"] is None and r["b_bus_bw_gbps"] is None for r in rows)
    line = next(x for x in format_diff(diff).splitlines() if x.strip().startswith("AllReduce") and "?" in x)
    assert " -1 " not in line and " 0.0 " not in line.split("?", 2)[-1], line


def test_collective_table_header_says_what_the_counts_are(tmp_path: Path) -> None:
    a = load_job(_job(tmp_path / "a", None), use_cache=False)
    lines = format_diff(diff_jobs(a, a)).splitlines()
    i = next(k for k, x in enumerate(lines) if "kind / group / size" in x)
    assert "count per rank per iteration" in lines[i]
    # right edges of the count columns line up with the rows'
    row = lines[i + 1]
    end = lines[i].index("A n/it") + len("A n/it")
    assert row.lstrip().startswith("AllReduce") and row[end - 1].isdigit() and row[end] == " ", (
        lines[i],
        row,
    )
