"""The size of a class as a reader meets it: its own lines plus those of every class of this project
it inherits from (a class split into mixins is still one class). Used by the size tests of the app
(test_app_layering.py) and of the engine (test_layering.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO


def project_classes() -> dict[str, tuple[int, list[str]]]:
    """Every class of app and lumos_core as "path:Name" -> (its own lines, its in-project bases as
    "path:Name"), the bases resolved through the module's own classes and its imports."""
    where: dict[str, Path] = {}
    for root in ("app", "lumos_core"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            where[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    out: dict[str, tuple[int, list[str]]] = {}
    for path in where.values():
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = str(path.relative_to(REPO))
        local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        imported = {
            a.asname or a.name: f"{where[node.module].relative_to(REPO)}:{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in where
            for a in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                resolved = [
                    f"{rel}:{b}" if b in local else imported[b] for b in bases if b in local or b in imported
                ]
                out[f"{rel}:{node.name}"] = ((node.end_lineno or node.lineno) - node.lineno + 1, resolved)
    return out


def inherited_lines(classes: dict[str, tuple[int, list[str]]], name: str) -> int:
    """A class's lines with those of every in-project class it inherits from (each counted once):
    a class split into mixins is still one class for the reader."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        c = todo.pop()
        if c in seen or c not in classes:
            continue
        seen.add(c)
        todo += classes[c][1]
    return sum(classes[c][0] for c in seen)


def class_sizes(prefix: str) -> dict[str, int]:
    """ "path:Name" -> lines with its in-project bases, for the classes under ``prefix``."""
    classes = project_classes()
    return {c: inherited_lines(classes, c) for c in classes if c.startswith(prefix)}
