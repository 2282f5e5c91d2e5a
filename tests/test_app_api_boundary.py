"""The app uses the engine the way a notebook does: through the public API (``lumos_core``,
``lumos_core.api`` and its modules, docs/api.md) and the data model, never a pipeline module.

Every ``import`` of ``lumos_core`` anywhere in an app module counts: at the top, inside a function,
under ``TYPE_CHECKING``. There is no list of exceptions: a name the app needs from deeper down
belongs in a public module (re-exported if it is a plain type, or as an API function if the app
would otherwise orchestrate pipeline steps itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

# What the app may import from the engine: the public API, the data model it draws, the errors it
# shows and the progress callbacks it passes.
ALLOWED = (
    "lumos_core",
    "lumos_core.api",
    "lumos_core.trace.model",
    "lumos_core.graph.model",
    "lumos_core.errors",
    "lumos_core.progress",
)


def allowed(module: str) -> bool:
    return module in ALLOWED or module.startswith("lumos_core.api.")


def engine_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every lumos_core import in ``path`` (``from lumos_core import x`` counts
    as ``lumos_core.x`` when ``x`` is a submodule, so a module cannot be reached that way either)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "lumos_core"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "lumos_core":
                continue
            out.append((node.lineno, node.module))
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                where = REPO / sub.replace(".", "/")
                if where.with_suffix(".py").is_file() or where.is_dir():
                    out.append((node.lineno, sub))
    return out


def test_the_app_imports_only_the_public_api_and_the_data_model() -> None:
    files = sorted((REPO / "app").rglob("*.py"))
    assert len(files) > 50  # the app is there
    seen = set()
    bad = []
    for path in files:
        for line, module in engine_imports(path):
            seen.add(module)
            if not allowed(module):
                bad.append(f"{path.relative_to(REPO)}:{line}: {module}")
    assert not bad, "the app imports engine modules below the public API:\n" + "\n".join(bad)
    assert any(m.startswith("lumos_core.api.") for m in seen)  # the scan sees the app's engine use


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The check itself: top-level, in a function, under TYPE_CHECKING, a submodule by name."""
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "import lumos_core.replay.run\n"
        "from lumos_core.api.views import top_kernels\n"
        "if TYPE_CHECKING:\n"
        "    from lumos_core.whatif.config import Baseline\n"
        "def f():\n"
        "    from lumos_core.sweep import grid\n"
        "    from lumos_core import open\n"
    )
    found = engine_imports(src)
    assert sorted(m for _, m in found if not allowed(m)) == [
        "lumos_core.replay.run",
        "lumos_core.sweep",
        "lumos_core.sweep.grid",
        "lumos_core.whatif.config",
    ]
