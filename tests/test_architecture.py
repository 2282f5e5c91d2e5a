"""The engine stays headless: nothing under lumos_core/ imports Qt, pyqtgraph or the app."""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import REPO

FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "PySide2", "pyqtgraph", "app", "shiboken6")


def test_lumos_core_sources_never_import_gui_modules() -> None:
    offenders = []
    files = sorted((REPO / "lumos_core").rglob("*.py"))
    assert len(files) > 10
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", ""))
                in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names = [str(node.args[0].value)]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not offenders, "lumos_core must stay headless:\n" + "\n".join(offenders)


def test_importing_every_engine_module_loads_no_gui_module() -> None:
    code = (
        "import importlib, pkgutil, sys, lumos_core\n"
        "for m in pkgutil.walk_packages(lumos_core.__path__, 'lumos_core.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "assert not bad, bad\n"
        "print('ok', len(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


def test_the_cli_runs_without_qt_installed(tmp_path) -> None:
    """Block PySide6/pyqtgraph imports entirely: `lumos inspect --help` must still work."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6'):\n"
        "            raise ImportError('blocked for this test: ' + name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "app", "inspect", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "trace" in out.stdout
