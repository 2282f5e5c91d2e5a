"""Shared test configuration: offscreen Qt, an isolated cache, paths to the real traces, and how the
suite shares the cores (pytest-xdist workers, ``-n auto`` in pyproject.toml)."""

from __future__ import annotations

import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Qt must never look for a display in tests (CI has none).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Compiled kernels: one cache for every test session, xdist worker and subprocess (set before
# lumos_core.jit is imported), so numba compiles once per machine rather than in every process.
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "lumos-test-numba-cache"))
# pytest-xdist's worker name ("gw0", ...), or "" in the controller / a run without workers.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

REPO = Path(__file__).resolve().parent.parent

# A crash of the test process (a C-level abort from Qt or an extension) loses whatever pytest had
# captured, so every thread's Python stack goes to a file instead; .ci/run prints it when the run
# fails. (pytest's own faulthandler plugin writes into the capture and is turned off in pyproject;
# hangs are pytest-timeout's job.) One file per process: each xdist worker writes its own.
CRASH_LOG = REPO / "build" / "test-artifacts" / (f"crash-{WORKER}.log" if WORKER else "crash.log")
CRASH_LOG.parent.mkdir(parents=True, exist_ok=True)
_crash_file = open(CRASH_LOG, "w")  # noqa: SIM115 - open for the whole session, for faulthandler
faulthandler.enable(file=_crash_file, all_threads=True)
# The real traces: ``pytest --traces DIR``, else the LUMOS_TRACES environment variable, else
# ../shared/traces next to the repository. pytest_configure settles the option before any test module
# is imported, so the names below (imported by the tests) always hold the folder in use.
DEFAULT_TRACES = REPO.parent / "shared" / "traces"


def _traces_folder(option: str | None = None) -> Path:
    chosen = option or os.environ.get("LUMOS_TRACES") or ""
    return Path(chosen).expanduser().resolve() if chosen else DEFAULT_TRACES.resolve()


def _needs_shared(folder: Path) -> pytest.MarkDecorator:
    where = (
        "chosen with --traces or LUMOS_TRACES"
        if folder != DEFAULT_TRACES.resolve()
        else "../shared is absent"
    )
    return pytest.mark.skipif(
        not folder.is_dir(),
        reason=f"real traces not available: {folder} does not exist ({where}); "
        "point pytest --traces DIR or LUMOS_TRACES at a folder of them",
    )


SHARED_TRACES = _traces_folder()
HAVE_SHARED = SHARED_TRACES.is_dir()
needs_shared = _needs_shared(SHARED_TRACES)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--traces",
        metavar="DIR",
        default=None,
        help="folder of real traces for the tests that need them (default: $LUMOS_TRACES, else ../shared/traces)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """The traces folder (``--traces``), and the kernels' background compile (:func:`_start_warm_up`)."""
    global SHARED_TRACES, HAVE_SHARED, needs_shared
    _start_warm_up(config)
    option = config.getoption("--traces")
    if option:
        os.environ["LUMOS_TRACES"] = str(option)  # subprocesses and later imports see it too
    SHARED_TRACES = _traces_folder(option)
    HAVE_SHARED = SHARED_TRACES.is_dir()
    needs_shared = _needs_shared(SHARED_TRACES)


def shared(*parts: str) -> Path:
    """Path inside the real traces' folder (tests using it must be marked ``needs_shared``)."""
    return SHARED_TRACES.joinpath(*parts)


def shared_file(folder: str, pattern: str) -> Path:
    matches = sorted(shared(folder).glob(pattern))
    assert matches, f"no {pattern} in {folder}"
    return matches[0]


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Never touch the user's real cache from tests."""
    os.environ["LUMOS_CACHE_DIR"] = str(tmp_path_factory.mktemp("lumos-cache"))


def run_lumos(*args: str, tmp_path: Path, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    """``lumos ARGS`` (the app's entry point) in a subprocess, offscreen, with the session's cache
    and a private settings folder (never the user's QSettings)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "LUMOS_CACHE_DIR": os.environ["LUMOS_CACHE_DIR"]}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


# ---------------------------------------------------------------- artifacts kept after the run
ARTIFACTS: list[str] = []


def artifact_dir(*parts: str) -> Path:
    """A fresh folder for files a test keeps for people to look at (screenshots): under
    ``LUMOS_TEST_ARTIFACTS`` if set, else build/test-artifacts/ in the repository (ignored by git)."""
    root = Path(os.environ.get("LUMOS_TEST_ARTIFACTS") or REPO / "build" / "test-artifacts")
    folder = root.joinpath(*parts)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def add_artifact(line: str) -> None:
    """Print ``line`` in the run's summary (pytest captures what tests print)."""
    ARTIFACTS.append(line)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if ARTIFACTS:
        terminalreporter.write_sep("-", "test artifacts")
        for line in ARTIFACTS:
            terminalreporter.write_line(line)


# ---------------------------------------------------------------- sharing the cores (pytest-xdist)
# The suite runs on every core (``-n auto`` in pyproject.toml). Work goes to the workers a test file
# at a time (a module's fixtures are made once), the longest first (see
# :func:`pytest_collection_modifyitems`); the tests of each group below go to one worker, one after
# another: those that start a local Ray instance (several at once would fight over 2 cores and the
# memory), and the xcb smoke test, whose last test reads what the runs at both scale factors left in
# the module. (xdist's own ``xdist_group`` mark renames node ids, which pytest 9 no longer allows;
# this scheduler reads the table instead.)
SERIAL_GROUPS = {
    "xcb": ("test_app_xcb_smoke.py",),
    "ray": (
        "test_load_ray.py",
        "test_sweep_ray.py",
        "test_app_sweep_dialog.py::test_the_ray_engine_gives_identical_rows_and_stops_with_the_dialog",
    ),
}


def serial_group(nodeid: str) -> str | None:
    name = nodeid.split("/")[-1]
    for group, members in SERIAL_GROUPS.items():
        if any(name == m or name.startswith((m + "::", m + "[")) for m in members):
            return group
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """Work units for the workers: a serial group, else a test file (``--dist load``, the default
    with ``-n``, only: another ``--dist`` given on the command line is left alone)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = serial_group(nodeid)
            return f"group {group}" if group else nodeid.split("::")[0]

    config.option.loadscopereorder = False  # keep the collection's order: the longest work first
    return FilesAndGroups(config, log)


_warm_up: subprocess.Popen[bytes] | None = None


def _start_warm_up(config: pytest.Config) -> None:
    """In the controller of a run with workers: compile the kernels into the shared numba cache in a
    background process while the workers start and collect, so that they load the compiled code
    instead of each compiling it (~15 CPU s on a fresh checkout; ~1 s to find them cached)."""
    global _warm_up
    workers = getattr(config.option, "numprocesses", None)
    if WORKER or not workers or os.environ.get("LUMOS_JIT", "1") == "0" or config.option.collectonly:
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    _warm_up = subprocess.Popen(
        [sys.executable, "-c", "from lumos_core.replay.warm_up import warm_up; warm_up()"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """A short run may end before the warm-up: it is stopped (each kernel it finished is cached)."""
    if _warm_up is not None and _warm_up.poll() is None:
        _warm_up.kill()
        _warm_up.wait()


# The work units that take longest, in seconds of test time (setup + call + teardown summed over a
# unit's tests; ``pytest -p no:randomly --durations=0``, summed by file, on the 2-core machine, 5 Dec
# 2026). Only their order matters: the workers take units from the front of one queue, so handing
# out the longest first leaves at most a short unit running at the end while another worker idles.
# A file not listed here (under ~8 s) keeps its place behind them; refresh the table when a file
# grows past that.
UNIT_SECONDS = {
    "test_stragglers.py": 49,
    "group ray": 46,
    "test_estimate.py": 45,
    "test_compare.py": 37,
    "test_estimate_new_knobs.py": 35,
    "test_robust_app.py": 35,
    "test_interleaved_rewrite.py": 30,
    "group xcb": 28,
    "test_published_priors.py": 25,
    "test_api.py": 23,
    "test_synth_cp.py": 20,
    "test_sweep_cli.py": 17,
    "test_fuzz_loader.py": 17,
    "test_ablation.py": 16,
    "test_export_format.py": 14,
    "test_synth_predict.py": 14,
    "test_app_what_if_cli.py": 12,
    "test_app_what_if.py": 11,
    "test_layering.py": 10,
    "test_sweep_grid.py": 10,
    "test_loader_real.py": 10,
    "test_kernels.py": 9,
    "test_rebuilt_invariants.py": 9,
    "test_synth.py": 8,
}


def unit_seconds(nodeid: str) -> int:
    """The measured length of the work unit (serial group, else file) that ``nodeid`` belongs to."""
    group = serial_group(nodeid)
    return UNIT_SECONDS.get(f"group {group}" if group else nodeid.split("::")[0].split("/")[-1], 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest work first: the units in :data:`UNIT_SECONDS`, longest first, then the other
    files with tests marked ``slow``, then the serial groups, then the rest in collection order. A
    long unit handed out last would leave the other workers idle at the end. Every worker sorts the
    same way (the scheduler requires the same collection), and a run without workers too."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("slow") is not None:
            kind = 0
        else:
            kind = 1 if serial_group(item.nodeid) else 2
        return -unit_seconds(item.nodeid), kind

    items.sort(key=rank)  # stable: the rest keep their order
