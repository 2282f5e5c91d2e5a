"""Big traces: the batch parser's memory stays bounded (checked under an address-space cap), files
the machine cannot hold are refused up front with a clear message, and a big file that cannot be
read in batches (truncated by a killed job) is reported instead of being parsed whole into the
OOM killer. The multi-GB measurement itself is bench/bench_big_folder.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import REPO
from tracegen import TraceBuilder

from lumos_core.errors import FolderError, LumosError
from lumos_core.trace import kineto_reader, loader
from lumos_core.trace.loader import load_job


def big_trace(path: Path, steps: int) -> Path:
    """One rank of ``steps`` steps, 64 kernels each with its launch and operator (~250 B/event)."""
    b = TraceBuilder(rank=0, world=1)
    t = 1000.0
    for s in range(steps):
        b.step(s, t, 700)
        for k in range(64):
            b.cpu("aten::mm", t + 10 * k, 8, args={"External id": s * 64 + k, "Input Dims": [[1024, 1024]]})
            b.launch(f"gemm_{k % 7}", t + 10 * k + 1, 4, t + 10 * k + 6, 9, stream=7)
        t += 1000
    path.write_bytes(orjson.dumps(b.doc()))
    return path


MEASURE = """
import resource, sys
import numpy, orjson
from lumos_core.trace.kineto_reader import parse_trace_file
with open("/proc/self/statm") as fh:
    vm = int(fh.read().split()[0]) * resource.getpagesize()
text = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (vm + int(float(sys.argv[3]) * text), resource.RLIM_INFINITY))
rank = parse_trace_file(sys.argv[1])
print(len(rank))
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_batch_parsing_fits_in_a_few_times_the_text(tmp_path: Path) -> None:
    """Under an address-space cap of 5x the text (plus the interpreter), a ~25 MB rank parses; the
    whole-document path would need ~10x and fail, so this also proves the batches are used."""
    path = big_trace(tmp_path / "rank0.json", steps=900)
    size = path.stat().st_size
    assert size > 20 * 2**20
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), str(size), "5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == 900 * (1 + 64 * 3)


def test_a_file_too_big_for_memory_gets_a_clear_message(tmp_path: Path, monkeypatch) -> None:
    """Refused before parsing, naming the file and the sizes (not the OOM killer)."""
    path = big_trace(tmp_path / "rank0.json", steps=2)
    monkeypatch.setattr(loader, "_available_memory", lambda: 1000)
    with pytest.raises(LumosError) as err:
        load_job(path, use_cache=False)
    msg = str(err.value)
    assert "rank0.json" in msg and "GiB of memory" in msg and "split the trace" in msg


def test_the_estimate_follows_the_batch_parser_not_a_dict_tree(tmp_path: Path) -> None:
    path = big_trace(tmp_path / "rank0.json", steps=4)
    size = path.stat().st_size
    assert loader._estimated_tree_bytes(path) <= 5 * size  # not the ~10x of a whole dict tree
    gz = tmp_path / "rank1.json.gz"
    import gzip

    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert kineto_reader.text_bytes(gz) == size  # the gzip trailer's uncompressed size


def test_a_big_file_that_cannot_be_read_in_batches_is_not_parsed_whole(tmp_path: Path, monkeypatch) -> None:
    """A truncated trace (its writer was killed) fails the batch reader at the end; parsing it whole
    would take ~10x the text. When that does not fit, say why instead of trying."""
    path = big_trace(tmp_path / "rank0.json", steps=20)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])  # cut in the middle of the event array
    monkeypatch.setattr(kineto_reader, "available_memory", lambda: 5 * len(data))
    with pytest.raises(FolderError) as err:
        load_job(path, use_cache=False)
    msg = str(err.value)
    assert "rank0.json" in msg and "may be truncated" in msg and "GiB of memory" in msg
    assert "\n" not in msg
    # with the memory, the whole-document path gives its precise diagnosis, as before
    monkeypatch.setattr(kineto_reader, "available_memory", lambda: 1 << 40)
    with pytest.raises(FolderError, match="looks truncated"):
        load_job(path, use_cache=False)
    json.loads(data)  # the uncut file was fine
