"""The layout is the pipeline: each folder of lumos_core is one stage and imports run one way.

    base (errors, progress, jit, os_memory, rank_threads)
      <- trace <- perf <- graph <- replay <- whatif <- sweep, compare <- api <- commands <- cli
    synth stands beside graph: it uses perf and trace only.
    app (the desktop) is above all of lumos_core; lumos_core never imports it (test_architecture).

Also: no module imports a ``_private`` name of another module; no import cycles among the modules of
lumos_core or among those of app; engine files stay under ~600 lines and classes under ~300 (the
deliberate exceptions are listed below, each with its reason); the command line and the sweep
workers never load Qt; the packages keep their public names.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from class_sizes import class_sizes
from conftest import REPO

DATA = REPO / "tests" / "data" / "cpu-gpt" / "base"

# Stage of every top-level part of lumos_core; a module may import its own stage and lower ones.
BASE = {"errors", "progress", "jit", "os_memory", "rank_threads"}  # one stage: the utilities everything uses
LEVEL = {
    "base": 0,
    "trace": 1,
    "perf": 2,
    "graph": 3,
    "synth": 3,
    "replay": 4,
    "whatif": 5,
    "sweep": 6,
    "compare": 6,
    "api": 7,  # the public Python API: what the CLI, the app and notebooks call
    "commands": 8,
    "cli": 9,
    "__main__": 10,
    "__init__": 10,  # lumos_core/__init__.py: the package's public names
}
# Stages on one level that must not import each other (beside each other, not above).
SIBLINGS = [{"graph", "synth"}, {"sweep", "compare"}]

# (importing module, imported module): why the import may point up or sideways. None today: keep it so.
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}
# (file, class or None for the whole file): why it is longer than the limit. A class counts with
# what it inherits from this project (tests/class_sizes.py): a mixin stack is one class to read.
SIZE_EXCEPTIONS: dict[tuple[str, str | None], str] = {}
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 300


def _modules(root: str) -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / root).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, int, list[str]]]:
    """(imported module, line, names) for every import of a project module, lazy ones included.
    ``from pkg import mod`` is an import of ``pkg.mod``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, []) for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            names = []
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in modules:
                    out.append((sub, node.lineno, []))
                else:
                    names.append(a.name)
            if names:
                out.append((node.module, node.lineno, names))
    return out


def _stage(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return "base" if top in BASE else top


CORE = _modules("lumos_core")
APP = _modules("app")


def test_every_part_of_lumos_core_has_a_stage() -> None:
    missing = sorted({_stage(m) for m in CORE} - set(LEVEL))
    assert not missing, f"give these a stage in LEVEL (and in docs/architecture.md): {missing}"


def test_imports_run_one_way_through_the_stages() -> None:
    bad = []
    for mod, path in CORE.items():
        src = _stage(mod)
        for target, line, _ in _imports(path, CORE):
            dst = _stage(target)
            if dst == src or (mod, target) in LAYER_EXCEPTIONS:
                continue
            sideways = any({src, dst} <= s for s in SIBLINGS)
            if LEVEL[dst] > LEVEL[src] or (LEVEL[dst] == LEVEL[src]) or sideways:
                bad.append(f"{path.relative_to(REPO)}:{line}: {src} imports {target} ({dst})")
    assert not bad, "imports against the stage order:\n" + "\n".join(bad)


def test_the_layer_exceptions_are_still_needed() -> None:
    found = {(m, t) for m, p in CORE.items() for t, _, _ in _imports(p, CORE)}
    stale = sorted(set(LAYER_EXCEPTIONS) - found)
    assert not stale, f"remove these from LAYER_EXCEPTIONS: {stale}"


@pytest.mark.parametrize("root", ["lumos_core", "app"])
def test_no_module_imports_another_modules_private_names(root: str) -> None:
    modules = CORE | APP
    bad = []
    for mod, path in _modules(root).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = {}  # local name -> project module, for attribute access (module._name)
        for target, line, names in _imports(path, modules):
            for n in names:
                if n.startswith("_") and target != mod:
                    bad.append(f"{path.relative_to(REPO)}:{line}: {n} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if f"{node.module}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not bad, "make these public where they are shared:\n" + "\n".join(bad)


@pytest.mark.parametrize("root", ["lumos_core", "app"])
def test_no_import_cycles(root: str) -> None:
    modules = _modules(root)
    g = nx.DiGraph()
    for mod, path in modules.items():
        g.add_node(mod)
        for target, _, _ in _imports(path, modules):
            if target != mod:
                g.add_edge(mod, target)
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    # a package's __init__ importing its own modules is no cycle unless a module imports it back
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles[:10])


def test_engine_files_and_classes_stay_small() -> None:
    bad = []
    for path in sorted((REPO / "lumos_core").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        n = path.read_text().count("\n")
        if n > MAX_FILE_LINES and (rel, None) not in SIZE_EXCEPTIONS:
            bad.append(f"{rel}: {n} lines")
    for name, length in sorted(class_sizes("lumos_core/").items()):
        rel, cls = name.split(":")
        if length > MAX_CLASS_LINES and (rel, cls) not in SIZE_EXCEPTIONS:
            bad.append(f"{rel}: class {cls} {length} lines with its in-project bases")
    assert not bad, "split these (or list them in SIZE_EXCEPTIONS with a reason):\n" + "\n".join(bad)


def test_the_size_exceptions_are_still_needed() -> None:
    sizes = class_sizes("lumos_core/")
    stale = []
    for (rel, cls), _ in SIZE_EXCEPTIONS.items():
        if cls is None:
            if (REPO / rel).read_text().count("\n") <= MAX_FILE_LINES:
                stale.append(rel)
        elif sizes.get(f"{rel}:{cls}", 0) <= MAX_CLASS_LINES:
            stale.append(f"{rel}:{cls}")
    assert not stale, f"remove these from SIZE_EXCEPTIONS: {stale}"


# Timers (perf_counter, process_time) belong to the callers that report a time: the API and the
# commands. Pipeline functions time nothing, except the elapsed times the product itself reports,
# listed here with the reason.
TIMERS = ("perf_counter", "perf_counter_ns", "process_time")
TIMER_PLACES = ("lumos_core/api/", "lumos_core/commands/")
TIMER_EXCEPTIONS = {
    "lumos_core/sweep/run.py": "a sweep's report says how long its engine took (CLI text, the app's sweep dialog)",
    "lumos_core/whatif/estimate.py": "an estimate reports its own time (estimate --json, the app's 'computed in')",
}


def test_timers_sit_with_the_callers_not_inside_pipeline_functions() -> None:
    found = set()
    for path in sorted((REPO / "lumos_core").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            timer = isinstance(node, ast.Attribute) and node.attr in TIMERS
            if timer and not rel.startswith(TIMER_PLACES):
                found.add(rel)
    assert found <= set(TIMER_EXCEPTIONS), (
        f"time these in their caller (api/, commands/): {sorted(found - set(TIMER_EXCEPTIONS))}"
    )
    assert set(TIMER_EXCEPTIONS) <= found, (
        f"remove from TIMER_EXCEPTIONS: {sorted(set(TIMER_EXCEPTIONS) - found)}"
    )


_QT = ("PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6")
_BLOCKER = (
    "import sys\n"
    "class _Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {_QT!r}:\n"
    "            raise ImportError('Qt loaded by a headless path: ' + name)\n"
    "sys.meta_path.insert(0, _Block())\n"
)


def _headless_env(tmp_path: Path) -> dict[str, str]:
    """Python processes (and the workers they start) for which importing Qt is an error."""
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER)
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QT_QPA_PLATFORM")}
    env["PYTHONPATH"] = f"{tmp_path}:{REPO}"
    env["LUMOS_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def test_lumos_replay_never_loads_qt(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from app.__main__ import main\n"
        f"rc = main(['replay', {str(DATA)!r}, '--json', '--quiet'])\n"
        f"qt = [m for m in sys.modules if m.split('.')[0] in {_QT!r}]\n"
        "print('QT', qt, file=sys.stderr)\n"
        "sys.exit(rc or (3 if qt else 0))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_headless_env(tmp_path),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"measured"' in out.stdout


def test_sweep_workers_never_load_qt(tmp_path: Path) -> None:
    """The local engine's worker processes inherit the blocker: a worker that imported Qt would
    fail its configurations."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "sweep",
            str(DATA),
            "--grid",
            "dp=1,2",
            "--jobs",
            "2",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_headless_env(tmp_path),
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["engine"] == "local" and doc["workers"] == 2
    assert [r["status"] for r in doc["rows"]] == ["ok", "ok"], doc["rows"]


# The packages' public names (what users' scripts import).
PUBLIC_NAMES = {
    "lumos_core": [
        "Cancelled",
        "CollectiveKind",
        "ConfigError",
        "FolderError",
        "GraphError",
        "Iteration",
        "Job",
        "Kind",
        "Lane",
        "LaneRole",
        "LumosError",
        "Progress",
        "RankTrace",
        "TraceError",
        "discover_trace_files",
        "load_job",
        "no_progress",
    ],
    "lumos_core.graph": [
        "NO_ANCHOR",
        "EdgeKind",
        "ExecutionGraph",
        "NodeType",
        "build_graph",
        "typical_launch_latency",
    ],
    "lumos_core.replay": [
        "CriticalPath",
        "IterationResult",
        "RankResult",
        "ReplayResult",
        "check_replayable",
        "critical_path",
        "parse_scale",
        "predicted_rank",
        "replay",
        "scaled_durations",
    ],
}


@pytest.mark.parametrize("path", sorted(PUBLIC_NAMES))
def test_packages_keep_their_public_names(path: str) -> None:
    module = importlib.import_module(path)
    missing = [n for n in PUBLIC_NAMES[path] if not hasattr(module, n)]
    assert not missing, f"{path} lost {missing}"
    assert set(PUBLIC_NAMES[path]) <= set(getattr(module, "__all__", PUBLIC_NAMES[path]))
