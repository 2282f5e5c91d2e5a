"""The knob registry is the one description of a knob: JobConfig's fields, the CLI options of
estimate/sweep/validate, the text form of changes, the sweep grid, the app's form and the rules of
the estimate are all generated from it, and a yes/no knob or one without a rule yet is supported."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import sys

import pytest
from conftest import REPO

from lumos_core import cli
from lumos_core.commands.common import add_knob_arguments, knob_values
from lumos_core.errors import ConfigError
from lumos_core.sweep.grid import parse_grid
from lumos_core.whatif import knob_registry as reg
from lumos_core.whatif.config import JobConfig, problems
from lumos_core.whatif.knobs import format_changes, parse_changes
from lumos_core.whatif.retime.rules import RULES

SAMPLE = {int: 2, float: 0.5, str: None, bool: True}


def _sample(k: reg.Knob):  # type: ignore[no-untyped-def]
    if k.type is bool:
        return True  # given as the bare flag (--sp)
    return k.values()[-1] if k.values() else SAMPLE[k.type]


def test_jobconfig_has_one_field_per_knob_in_registry_order() -> None:
    fields = dataclasses.fields(JobConfig)
    assert [f.name for f in fields] == [k.name for k in reg.REGISTRY]
    assert [f.default for f in fields] == [k.default for k in reg.REGISTRY]
    c = JobConfig(dp=4, gpu="H200", nvlink_gbps=300.0)
    assert pickle.loads(pickle.dumps(c)) == c and hash(c) == hash(
        JobConfig(dp=4, gpu="H200", nvlink_gbps=300.0)
    )
    assert list(c.as_dict()) == [*reg.KNOB, "world_size"]
    # the GPU is resolved once, with the link knobs applied
    assert c.gpu_profile.name == "H200" and c.hardware.nvlink_bandwidth == 300e9
    assert c.hardware.network_bandwidth == c.gpu_profile.network_bandwidth


def test_every_rule_a_knob_names_exists_and_every_rule_serves_a_knob() -> None:
    assert list(RULES) == list(reg.TIME_RULES)
    named = {r for k in reg.REGISTRY for r in k.rules}
    assert named <= set(reg.EFFECTS), named - set(reg.EFFECTS)
    assert set(RULES) <= named, f"rules no knob names: {set(RULES) - named}"
    for k in reg.REGISTRY:
        assert k.group in reg.GROUPS and k.label and k.flag == "--" + k.name.replace("_", "-")


@pytest.mark.parametrize("command", ["estimate", "sweep"])
def test_every_knob_is_an_option_of_estimate_and_sweep(command: str) -> None:
    parser = cli.build_parser({command})
    argv = [command, "some/path"] + (["--grid", "dp=2"] if command == "sweep" else [])
    given = []
    for k in reg.REGISTRY:
        v = _sample(k)
        given += [k.flag] if k.type is bool else [k.flag, k.text(v) if v is not None else "x"]
    args = parser.parse_args(argv + given)
    got = knob_values(args)
    assert set(got) == set(reg.KNOB)
    for k in reg.REGISTRY:
        if _sample(k) is not None:
            assert got[k.name] == _sample(k), k.name


def test_validate_takes_the_shape_knobs_for_both_jobs() -> None:
    args = cli.build_parser({"validate"}).parse_args(
        ["validate", "a", "b", "--baseline-layers", "8", "--layers", "16"]
    )
    assert args.a_layers == 8 and args.b_layers == 16
    shape = [k.name for k in reg.REGISTRY if k.shape]
    assert all(hasattr(args, f"a_{n}") and hasattr(args, f"b_{n}") for n in shape)


BOOL = reg.Knob(
    name="sp", type=bool, default=False, group="Parallelism", label="Sequence parallel",
    short="SP", help="shard activations along the sequence", rules=(),
)  # fmt: skip


def test_a_yes_no_knob_gets_a_flag_pair_text_and_validation() -> None:
    p = argparse.ArgumentParser()
    add_knob_arguments(p, [BOOL])
    assert p.parse_args(["--sp"]).sp is True
    assert p.parse_args(["--no-sp"]).sp is False
    assert p.parse_args([]).sp is None
    for text, value in (("true", True), ("off", False), ("1", True), ("no", False)):
        assert BOOL.coerce(text) is value
    assert BOOL.coerce(BOOL.text(True)) is True
    with pytest.raises(ConfigError, match="sp must be true or false"):
        BOOL.coerce("maybe")
    assert BOOL.problem_with(1) == "sp must be true or false (got 1)"
    assert BOOL.problem_with(False) == "" and BOOL.values() == [True, False]
    assert not BOOL.retimed


def test_a_knob_without_a_rule_yet_says_so_beside_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reg.KNOB, "sp", BOOL)
    notes = reg.unmodelled_notes(["sp", "dp"], {"sp": True, "dp": 16})
    assert notes == [
        "sp=true: no re-timing rule for this knob yet; the predicted time does not include its effect"
    ]
    assert not reg.KNOB["zero"].retimed  # memory only, and its help says so
    assert "memory model only" in reg.KNOB["zero"].help
    assert reg.KNOB["recompute"].retimed and "recompute" in reg.KNOB["recompute"].rules


def test_the_text_form_round_trips_every_knob() -> None:
    changes = {k.name: _sample(k) for k in reg.REGISTRY if _sample(k) is not None}
    text = format_changes(changes)
    assert parse_changes(text) == changes
    assert text.split(",")[0].startswith("dp=")  # registry order
    grid = parse_grid("tp=1,2 dp=8-32", {"gpu": "A100"})
    assert grid.columns == ["dp", "tp", "gpu"] and grid.knobs["dp"] == [8, 16, 32]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dp": 0}, "dp must be a whole number >= 1 (got 0)"),
        ({"layers": -2}, "layers must be a whole number >= 1 (got -2)"),
        ({"schedule": "zb"}, "unknown schedule 'zb': use 1f1b or gpipe"),
        ({"recompute": "some"}, "unknown recompute mode 'some': use none, selective, full"),
        ({"zero": 4}, "zero must be a ZeRO stage 0-3 (got 4)"),
        ({"gpu": "TPU9"}, "unknown GPU 'TPU9': use one of"),
        ({"nvlink_gbps": 0.0}, "nvlink_gbps must be > 0 GB/s"),
        ({"network_gbps": float("nan")}, "network_gbps must be > 0 GB/s"),
        ({"cpu_scale": 101.0}, "cpu_scale must be a factor between 0 and 100 (got 101.0)"),
    ],
)
def test_validation_comes_from_the_registry(changes: dict, message: str) -> None:
    found = problems(JobConfig(**changes))
    assert len(found) == 1 and found[0].startswith(message), found


def test_the_app_form_shows_every_knob_once_in_its_group() -> None:
    pytest.importorskip("PySide6")
    from app.whatif.config_panel import GROUPS
    from app.whatif.knob_group import CHOICES

    assert [t for t, _ in GROUPS] == list(reg.GROUPS)
    assert [n for _, knobs in GROUPS for n, _, _ in knobs] == sorted(reg.KNOB, key=_form_order)
    assert CHOICES["zero"] == [0, 1, 2, 3] and "H100" in CHOICES["gpu"]


def _form_order(name: str) -> tuple[int, int]:
    k = reg.KNOB[name]
    return reg.GROUPS.index(k.group), reg.REGISTRY.index(k)


ADD_A_KNOB = """
import dataclasses, json, sys
import lumos_core.whatif.knob_registry as reg
fp8 = reg.Knob(name="fp8", type=bool, default=False, group="Parallelism", label="FP8 matmuls",
               short="FP8", help="run the GEMMs in FP8 (a knob made up for this test)", rules=())
reg.REGISTRY = (*reg.REGISTRY, fp8)
reg.KNOB["fp8"] = fp8
# everything below is generated from the registry: nothing else knows the knob
from lumos_core import cli
from lumos_core.sweep.grid import parse_grid
from lumos_core.trace.loader import load_job
from lumos_core.whatif.config import JobConfig
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.knobs import format_changes, parse_changes
out = {}
out["field"] = [f.name for f in dataclasses.fields(JobConfig)][-1]
out["parsed"] = parse_changes("dp=2,fp8=on")
out["text"] = format_changes({"fp8": True, "dp": 2})
args = cli.build_parser({"estimate"}).parse_args(["estimate", "x", "--no-fp8"])
out["cli"] = args.fp8
out["grid"] = parse_grid("fp8=true,false").points()
r = estimate(load_job(sys.argv[1], workers=1), {"fp8": True})
out["label"] = r.predicted.config.label(r.baseline.config)
out["notes"] = [n for n in r.notes if n.startswith("fp8=")]
try:
    from app.whatif.config_panel import GROUPS
    out["app"] = [k for _, knobs in GROUPS for k, _, _ in knobs if k == "fp8"]
except ImportError:
    out["app"] = ["fp8"]
print(json.dumps(out))
"""


def test_a_knob_added_to_the_registry_alone_reaches_every_part() -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-c", ADD_A_KNOB, str(REPO / "tests" / "data" / "cpu-gpt" / "base")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["field"] == "fp8" and got["parsed"] == {"dp": 2, "fp8": True} and got["text"] == "dp=2,fp8=true"
    assert got["cli"] is False and got["grid"] == [{"fp8": True}, {"fp8": False}]
    assert got["label"] == "FP8 True" and got["app"] == ["fp8"]
    assert got["notes"] == [
        "fp8=true: no re-timing rule for this knob yet; the predicted time does not include its effect"
    ]


def test_a_configuration_label_names_context_and_virtual_pipeline_parallelism() -> None:
    """`lumos estimate` prints "baseline <label> <N> GPUs": a CP2 job of 16 GPUs labelled "TP2 PP2
    DP2" reads as 8 GPUs; the label names CP and VP when they are in use, and only then."""
    from lumos_core.whatif.config import JobConfig

    plain = JobConfig(tp=2, pp=2, dp=2)
    assert plain.label() == "TP2 PP2 DP2"
    assert plain.with_changes(cp=2).label() == "TP2 PP2 DP2 CP2"
    assert plain.with_changes(vp=2).label() == "TP2 PP2 DP2 VP2"


def test_pp_1_on_an_interleaved_trace_says_the_traced_vp_is_kept() -> None:
    """`estimate --pp 1` on a vp=2 trace keeps VP 2 and is refused; the refusal must say that VP
    came from the trace and how to drop it, once, and only when VP was not changed."""
    from lumos_core.whatif.config import Baseline, JobConfig, problems

    base = Baseline(config=JobConfig(tp=2, pp=2, vp=2, microbatches=4, layers=8))
    found = problems(base.config.with_changes(pp=1), base)
    assert found and "VP 2 as traced" in found[0] and "--vp 1" in found[0]
    found = problems(base.config.with_changes(pp=8), base)
    assert len(found) == 2 and sum("as traced" in p for p in found) == 1
    assert problems(base.config.with_changes(pp=1, vp=1), base) == []
    plain = Baseline(config=JobConfig(tp=2, pp=2, vp=1, microbatches=4, layers=8))
    assert not any("as traced" in p for p in problems(plain.config.with_changes(pp=1, vp=2), plain))
