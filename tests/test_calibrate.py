"""lumos calibrate: a hardware profile fitted on some runs, checked on a run it never saw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from conftest import REPO, needs_shared, run_lumos, shared

from lumos_core.commands.calibrate import POOR_FIT_PCT, format_calibration
from lumos_core.compare.calibrate import fit
from lumos_core.compare.validate import validate_jobs
from lumos_core.errors import LumosError
from lumos_core.perf.profile import HardwareProfile
from lumos_core.trace.loader import load_job
from lumos_core.whatif.estimate import estimate

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"
FIT_ON = ("base", "layers8", "seq256", "mb2")
HELD_OUT = ("ffn2048", "microbatch8", "hidden512")


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory) -> HardwareProfile:
    cal = fit([load_job(CPU_GPT / n) for n in FIT_ON])
    path = tmp_path_factory.mktemp("profile") / "cpu.json"
    cal.profile.save(path)
    return HardwareProfile.load(path)


def test_cpu_profile_fits_gemm_classes_and_names_what_it_cannot_know(cpu_profile) -> None:
    p = cpu_profile
    assert p.device == "CPU" and len(p.runs) == len(FIT_ON)
    assert len(p.gemm) >= 2 and all(c.flops_per_s > 0 and c.samples > 0 for c in p.gemm)
    assert p.attention_flops_per_s and p.elementwise_elems_per_s
    assert p.comm is None and p.launch_overhead_us is None  # CPU runs: no NCCL, no launches
    text = " ".join(p.unconstrained)
    assert "collectives" in text and "launch" in text and "point-to-point" in text


def test_profile_round_trips_through_its_file(cpu_profile, tmp_path) -> None:
    cpu_profile.save(tmp_path / "p.json")
    assert HardwareProfile.load(tmp_path / "p.json") == cpu_profile
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    with pytest.raises(LumosError, match="not a Lumos hardware profile"):
        HardwareProfile.load(tmp_path / "bad.json")


@pytest.mark.parametrize("name", HELD_OUT)
def test_validate_on_a_held_out_run_is_no_worse_with_the_fitted_profile(cpu_profile, name) -> None:
    """Hold-out: the profile never saw ``name``. On these CPU runs the GEMM rate is nearly flat
    across shape classes (~85-92 GFLOP/s), so the profile can only move predictions a little; it
    must not make them worse. 0.5 percentage points is ten times below the run-to-run noise of
    these traces (~5%, tests/data/cpu-gpt/README.md)."""
    a, b = load_job(CPU_GPT / "base"), load_job(CPU_GPT / name)
    default = validate_jobs(a, b).error_pct
    fitted = validate_jobs(a, b, profile=cpu_profile)
    assert abs(fitted.error_pct) <= abs(default) + 0.5, (name, default, fitted.error_pct)
    rules = {r.model for r in fitted.result.retimed}
    assert any("profile's rate" in m for m in rules)  # the profile was used, not ignored


def test_estimate_without_a_profile_is_unchanged(cpu_profile) -> None:
    job = load_job(CPU_GPT / "base")
    plain = estimate(job, {"ffn": 2048})
    assert all("profile" not in r.model for r in plain.retimed)


@needs_shared
def test_runs_of_different_devices_are_refused() -> None:
    with pytest.raises(LumosError, match="different devices"):
        fit([load_job(CPU_GPT / "base"), load_job(shared("h100-nanogpt-8rank"))])


@needs_shared
def test_gpu_profile_fits_collectives_and_launches() -> None:
    cal = fit([load_job(shared("h100-nanogpt-8rank"))])
    p = cal.profile
    assert p.comm is not None and p.comm.source_intra.startswith("fitted")
    assert {a.kind for a in p.alpha_beta} == {"AllGather", "ReduceScatter"}
    assert all(a.scope == "intra" and a.beta_gbps > 0 for a in p.alpha_beta)
    assert p.launch_overhead_us and 0.5 < p.launch_overhead_us < 100
    assert any("network" in u for u in p.unconstrained)  # one node: no inter-node samples
    # in-sample: GEMM classes describe the GEMMs better than one rate for all (the null model)
    assert cal.residuals["gemm"] < cal.residuals["gemm_one_rate"]


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
def test_cli_calibrate_then_validate_with_the_profile(tmp_path) -> None:
    out = tmp_path / "cpu.json"
    runs = [str(CPU_GPT / n) for n in FIT_ON]
    r = run_lumos("calibrate", *runs, "--out", str(out), "-q", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "GEMM rate by shape class" in r.stdout and "not constrained" in r.stdout
    r = run_lumos("calibrate", *runs, "--out", str(out), "-q", tmp_path=tmp_path)
    assert r.returncode == 2 and "exists" in r.stderr  # never overwritten silently
    r = run_lumos(
        "validate",
        str(CPU_GPT / "base"),
        str(CPU_GPT / "ffn2048"),
        "--profile",
        str(out),
        "--json",
        "-q",
        tmp_path=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert isinstance(orjson.loads(r.stdout)["error_pct"], float)
    assert orjson.loads(r.stdout)["sample"].startswith("hold-out")  # ffn2048 is not in FIT_ON
    # a run the profile was fitted on scores in-sample, and says so
    fitted = FIT_ON[-1]
    r = run_lumos(
        "validate",
        str(CPU_GPT / "base"),
        str(CPU_GPT / fitted),
        "--profile",
        str(out),
        "-q",
        tmp_path=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1].startswith("in-sample: the --profile was fitted on B")


def test_attention_and_elementwise_residuals_are_in_sample_and_a_poor_fit_is_explained() -> None:
    """The residual is median |measured / (work / rate) - 1| at the fitted rate (recomputed here);
    CPU elementwise operators differ in cost per element by more than 10x, so one rate fits them
    poorly (a real misfit, not a bug): the report says so and labels both residuals in-sample."""
    cal = fit([load_job(CPU_GPT / n) for n in ("base", "layers8")])
    for name, rate in (
        ("attention", cal.profile.attention_flops_per_s),
        ("elementwise", cal.profile.elementwise_elems_per_s),
    ):
        pts = np.asarray(getattr(cal.samples, name))
        assert rate == pytest.approx(pts[:, 0].sum() / pts[:, 1].sum())
        expect = np.median(np.abs(pts[:, 1] / (pts[:, 0] / rate) - 1)) * 100
        assert cal.residuals[name] == pytest.approx(expect, abs=0.01)
    text = format_calibration(cal, Path("p.json"))
    assert "calls, in-sample residual" in text and "ops, in-sample residual" in text
    assert cal.residuals["elementwise"] > POOR_FIT_PCT > cal.residuals["attention"]
    assert "elementwise: one rate fits these operators poorly" in text
    assert "attention: one rate" not in text
