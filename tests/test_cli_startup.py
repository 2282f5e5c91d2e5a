"""The command line's start-up: only the named command's module is imported, the garbage collector
is left as it was for callers that go on, and ``lumos replay --timings`` reports its stages without
changing anything else in the report."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
from contextlib import redirect_stdout

import orjson
from conftest import REPO

from lumos_core import cli

TRACE = REPO / "tests" / "data" / "cpu-gpt" / "base"
STAGES = ["load", "graph", "replay", "holdout", "report"]
TIMING_KEYS = {"seconds", "simulate_seconds", "tasks_per_second"}


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_command_line_imports_only_its_own_command_module() -> None:
    code = (
        "import sys\n"
        "from lumos_core import cli\n"
        "cli.build_parser({word})\n"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('lumos_core.commands.')\n"
        "      and m != 'lumos_core.commands.common'))\n"
    )
    assert _fresh(code.format(word="{'replay'}")) == "['replay']"
    assert _fresh(code.format(word="set()")) == "[]"
    assert _fresh(code.format(word="None")) == str(sorted(cli.COMMANDS))


def test_help_lists_every_command_without_importing_them() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from lumos_core import cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = cli.main([])\n"
        "heavy = [m for m in sys.modules if m.startswith(('lumos_core.commands.', 'lumos_core.whatif',\n"
        "         'lumos_core.sweep', 'lumos_core.synth', 'numba'))]\n"
        "print(rc, all(name in buf.getvalue() for name in cli.COMMANDS), heavy)\n"
    )
    assert _fresh(code) == "2 True []"


def _replay(*extra: str) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli.main(["replay", str(TRACE), "--no-holdout", "-q", *extra])
    return rc, buf.getvalue()


def test_main_leaves_the_garbage_collector_as_it_found_it() -> None:
    assert gc.isenabled() and gc.get_freeze_count() == 0
    rc, _ = _replay("--json")
    assert rc == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        assert _replay("--json")[0] == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_replay_timings_add_the_stages_and_change_nothing_else() -> None:
    def strip(d: object) -> object:
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in TIMING_KEYS}
        if isinstance(d, list):
            return [strip(v) for v in d]
        return d

    plain = orjson.loads(_replay("--json")[1])
    timed = orjson.loads(_replay("--json", "--timings")[1])
    t = timed.pop("timings")
    assert "timings" not in plain
    assert strip(timed) == strip(plain)
    assert list(t["stages"]) == STAGES
    for stage in t["stages"].values():
        assert stage["wall_s"] >= 0 and stage["cpu_s"] >= 0
    # the stages tile the pipeline, which starts after the process's imports
    assert abs(sum(s["wall_s"] for s in t["stages"].values()) - t["pipeline"]["wall_s"]) < 1e-3
    assert t["process_cpu_s_before_first_stage"] > 0
    assert t["last_stage_end_unix_time"] >= t["first_stage_unix_time"]

    text = _replay("--timings")[1]
    last = text.strip().splitlines()[-1]
    assert last.startswith("timings (wall s): load ") and "pipeline" in last


def test_replay_process_exits_cleanly_with_its_whole_report() -> None:
    """The exit skips the collector's last passes: the report must still be complete."""
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", str(TRACE), "--no-holdout", "--json", "-q"],
        capture_output=True,
        cwd=REPO,
        timeout=180,
        env={**os.environ, "LUMOS_CACHE_DIR": os.environ["LUMOS_CACHE_DIR"]},
    )
    assert out.returncode == 0, out.stderr
    assert orjson.loads(out.stdout)["tasks"] > 0
