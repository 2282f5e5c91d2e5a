"""Shared test configuration: offscreen Qt, an isolated cache, and paths to the real traces."""

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
# Compiled kernels: one cache for every test session and subprocess (set before lumos_core.jit is
# imported), so numba compiles once per machine rather than in every test run.
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "lumos-test-numba-cache"))

REPO = Path(__file__).resolve().parent.parent

# A crash of the test process (a C-level abort from Qt or an extension) loses whatever pytest had
# captured, so every thread's Python stack goes to a file instead; .ci/run prints it when the run
# fails. (pytest's own faulthandler plugin writes into the capture and is turned off in pyproject;
# hangs are pytest-timeout's job.)
CRASH_LOG = REPO / "build" / "test-artifacts" / "crash.log"
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
    global SHARED_TRACES, HAVE_SHARED, needs_shared
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
