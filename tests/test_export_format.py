"""Files Lumos writes (predictions, rebuilt and synthetic jobs) carry the fields and the textual form
of real Kineto traces, so HTA, Perfetto and TraceLens treat them like a measured job.

The reference is the real traces in ../shared/traces: what they hold, our files must hold in the
same form. HTA in particular finds a file's rank with the regex ``"rank":\\s+(\\d+)`` on its text.
"""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path

import orjson
import pytest
from conftest import REPO, needs_shared, shared

from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import group_roles
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.export import write_job

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"
HTA_RANK = re.compile(rb'"rank":\s+(\d+)')
# Kineto's layout of a complete event and of distributedInfo, as text.
EVENT_LAYOUT = re.compile(rb'\{\n    "ph": "X", "cat": "[^"]*", "name": ')
DIST_LAYOUT = re.compile(
    rb'\n\s*"distributedInfo": \{"backend": "\w+", "rank": \d+, "world_size": \d+, "pg_count": \d+'
)
PG_KEYS = {"pg_name", "pg_desc", "backend_config", "pg_size", "ranks"}
COLLECTIVE_KEYS = {"Process Group Name", "Process Group Description", "Process Group Ranks", "Group size"}


def text_of(path: Path) -> bytes:
    with gzip.open(path) as fh:
        return fh.read()


def header_text(text: bytes) -> bytes:
    return text[: text.index(b'"traceEvents"')]


def check_file(path: Path, world: int, reference: dict | None = None, event_layout: bool = True) -> dict:
    """Everything a tool reading Kineto files relies on, checked on one written file."""
    text = text_of(path)
    head = header_text(text)
    m = HTA_RANK.search(head)
    assert m, f"{path.name}: no '\"rank\": N' before traceEvents (HTA would map it to rank 0)"
    doc = orjson.loads(text)
    info = doc["distributedInfo"]
    assert int(m.group(1)) == info["rank"]
    assert DIST_LAYOUT.search(head), path.name
    assert next(iter(doc)) == "schemaVersion" and "traceName" in doc and "deviceProperties" in doc
    assert info["world_size"] == world and 0 <= info["rank"] < world
    assert info["pg_count"] == len(info["pg_config"]) >= 1
    names = set()
    for pg in info["pg_config"]:
        assert set(pg) >= PG_KEYS
        assert pg["pg_size"] == len(pg["ranks"]) and info["rank"] in pg["ranks"]
        names.add(pg["pg_name"])
    if event_layout:
        assert EVENT_LAYOUT.search(text), f"{path.name}: events not in Kineto's layout"
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X":
            assert {"cat", "name", "pid", "tid", "ts", "dur"} <= set(ev)
        args = ev.get("args") or {}
        if "Process Group Name" in args:
            assert set(args) >= COLLECTIVE_KEYS, ev["name"]
            ranks = orjson.loads(args["Process Group Ranks"])
            assert args["Group size"] == len(ranks) and info["rank"] in ranks
            assert args["Process Group Name"] in names
    if reference is not None:
        # what the real trace's distributedInfo and groups hold, ours holds too
        assert set(reference["distributedInfo"]) - {"nccl_version"} <= set(info)
        assert set(reference["distributedInfo"]["pg_config"][0]) <= set(info["pg_config"][0])
        order = [k for k in reference if k in doc]
        assert [k for k in doc if k in order] == order, "top-level keys not in Kineto's order"
    return doc


def files_of(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json.gz"))


@pytest.fixture(scope="module")
def real_reference() -> dict | None:
    from conftest import HAVE_SHARED

    if not HAVE_SHARED:
        return None
    path = sorted(shared("h100-nanogpt-8rank").glob("*.json.gz"))[0]
    text = text_of(path)
    # the regexes describe real traces (if they did not, the checks below would prove nothing)
    assert HTA_RANK.search(header_text(text)) and DIST_LAYOUT.search(header_text(text))
    assert EVENT_LAYOUT.search(text)
    return orjson.loads(text)


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
@needs_shared
def test_dp16_prediction_of_nanogpt_reads_like_a_measured_job(tmp_path, real_reference) -> None:
    job = load_job(shared("h100-nanogpt-8rank"))
    r = estimate(job, {"dp": 16})
    out = tmp_path / "dp16"
    config = r.predicted.config
    write_job(r.timeline, r.represents, out, r.world_size, config=config, roles=group_roles(job)[0])
    files = files_of(out)
    assert len(files) == 16
    seen = set()
    for f in files:
        doc = check_file(f, 16, real_reference)
        seen.add(doc["distributedInfo"]["rank"])
        groups = {g["pg_size"] for g in doc["distributedInfo"]["pg_config"]}
        assert 16 in groups  # the data-parallel (and default) group of the new job
    assert seen == set(range(16))
    again = load_job(out)
    assert again.world_size == 16 and all(t.rank_source == "distributedInfo" for t in again.ranks)
    sizes = {int(g) for t in again.ranks for g in t.collectives.group_size.tolist()}
    assert sizes == {16}


@pytest.mark.parametrize("knobs", [{"dp": 2}, {"layers": 8}, {"microbatches": 2}])
def test_cpu_predictions_read_like_measured_jobs(tmp_path, knobs, real_reference) -> None:
    job = load_job(CPU_GPT / "base")
    r = estimate(job, knobs)
    out = tmp_path / "pred"
    write_job(r.timeline, r.represents, out, r.world_size, config=r.predicted.config)
    for f in files_of(out):
        doc = check_file(f, r.world_size, real_reference)
        assert doc["distributedInfo"]["backend"] == "gloo"  # a CPU job, as torch.distributed says
    assert load_job(out).world_size == r.world_size


def test_synthetic_jobs_read_like_measured_jobs(tmp_path, real_reference) -> None:
    """Synthetic files write their top-level keys as Kineto does and their events compact (they are
    written at scale, chunk by chunk with orjson; JSON readers do not mind the spacing of events)."""
    tiny = ModelSpec("tiny", layers=4, hidden=256, ffn=1024, heads=4, seq=128, vocab=1024)
    cfg = SynthConfig(model=tiny, tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=3)
    synthesize(cfg, tmp_path / "synth")
    for f in files_of(tmp_path / "synth"):
        doc = check_file(f, 8, event_layout=False)
        if real_reference is not None:
            assert set(real_reference["distributedInfo"]) <= set(doc["distributedInfo"])


def test_hta_finds_every_rank_of_an_export(tmp_path) -> None:
    """Round trip through Holistic Trace Analysis where it is installed (it is not a test
    dependency: it pulls in Jupyter)."""
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is not installed")
    job = load_job(CPU_GPT / "base")
    r = estimate(job, {"dp": 2})
    out = tmp_path / "pred"
    write_job(r.timeline, r.represents, out, r.world_size, config=r.predicted.config)
    with warnings.catch_warnings():  # HTA's own deprecation warnings (pandas) are not ours
        warnings.simplefilter("ignore")
        analyzer = hta.TraceAnalysis(trace_dir=str(out))
    assert sorted(analyzer.t.get_ranks()) == [0, 1]
