"""The app's parts talk through signals and small public methods: no import cycle among app
modules, no private name of another module imported or reached into, and no module or class
grown past the size a reader can hold (the engine's layering is tested in test_layering.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
from class_sizes import class_sizes, inherited_lines
from conftest import REPO

APP = REPO / "app"
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 300


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, module, imported names) of every import, wherever it is (functions and
    ``if TYPE_CHECKING:`` blocks too: a cycle through them is still a cycle for the reader)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assigned names and attributes."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        out.add(sub.id)
                    elif isinstance(sub, ast.Attribute):
                        out.add(sub.attr)
    return out


def test_app_modules_import_each_other_without_cycles() -> None:
    modules = _modules()
    assert len(modules) > 20
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for _line, module, names in _imports(ast.parse(path.read_text(), filename=str(path))):
            # "from app.x import y": y may be a module of package app.x
            for target in [module, *(f"{module}.{n}" for n in names)]:
                if target in modules and target != name and modules[target].name != "__init__.py":
                    graph.add_edge(name, target)
    cycles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(graph))
    assert not cycles, "app modules import each other in a cycle:\n" + "\n".join(cycles[:20])


# Pairs of top-level app parts (a package such as app/whatif, or a module such as app/settings)
# that still import each other, each with its reason. Stale entries fail the test below. (The
# last pair, loaded_job <-> timeline, went when the Qt-free view model moved to app/view_model.)
MUTUAL_PART_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _part(module: str) -> str:
    """``app.whatif.runner`` -> ``app.whatif``: the top-level part of the app a module is in."""
    return ".".join(module.split(".")[:2])


def _part_imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where, for every import between two parts (imports in
    functions and under ``if TYPE_CHECKING:`` too: the reader still follows them)."""
    modules = _modules()
    out: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        if name == "app":
            continue
        for line, module, names in _imports(ast.parse(path.read_text(), filename=str(path))):
            for target in [module, *(f"{module}.{n}" for n in names)]:
                if target in modules and target != "app" and _part(target) != _part(name):
                    out.setdefault((_part(name), _part(target)), []).append(
                        f"{path.relative_to(REPO)}:{line}"
                    )
    return out


def _mutual_parts(edges: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    return {(a, b): [*where, *edges[(b, a)]] for (a, b), where in edges.items() if a < b and (b, a) in edges}


def test_no_two_app_parts_import_each_other() -> None:
    """Issue 29: a package or module of the app that imports a sibling which imports it back
    cannot be read (or moved) without the other; the shared piece belongs below both."""
    edges = _part_imports()
    # the scan sees the one-way imports that remain (a scan that finds nothing passes vacuously)
    assert ("app.whatif", "app.sweep") in edges and ("app.main_window", "app.whatif") in edges
    found = _mutual_parts(edges)
    new = [
        f"{a} <-> {b}: {', '.join(sorted(set(w))[:6])}"
        for (a, b), w in sorted(found.items())
        if (a, b) not in MUTUAL_PART_EXCEPTIONS
    ]
    assert not new, "move what both use below both (or pass it in):\n" + "\n".join(new)
    stale = sorted(set(MUTUAL_PART_EXCEPTIONS) - set(found))
    assert not stale, f"remove these from MUTUAL_PART_EXCEPTIONS: {stale}"


def test_mutual_part_imports_are_found_through_type_checking_blocks() -> None:
    edges = {("app.a", "app.b"): ["app/a.py:3"], ("app.b", "app.a"): ["app/b/x.py:9"], ("app.b", "app.c"): []}
    assert _mutual_parts(edges) == {("app.a", "app.b"): ["app/a.py:3", "app/b/x.py:9"]}
    tree = ast.parse("if TYPE_CHECKING:\n    from app.main_window import MainWindow\n")
    assert _imports(tree) == [(2, "app.main_window", ["MainWindow"])]


def test_app_never_imports_a_private_name_of_another_module() -> None:
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, module, names in _imports(tree):
            bad = [n for n in [*module.split("."), *names] if _private(n)]
            if bad and _ours(module):
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {', '.join(bad)} from {module}")
    assert not offenders, "make the name public where it is defined:\n" + "\n".join(offenders)


def _third_party_names(tree: ast.AST) -> set[str]:
    """Names bound to modules or objects from outside the project (``sys``: ``sys._MEIPASS`` is
    PyInstaller's to define, not ours)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names if not _ours(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not _ours(node.module or ""):
            out |= {a.asname or a.name for a in node.names}
    return out


def _ours(module: str) -> bool:
    return module.split(".")[0] in ("app", "lumos_core")


def test_app_reaches_into_no_private_attribute_defined_elsewhere() -> None:
    """``window._show_error()``: a private name used on an object (``self`` included: a part of a
    class in another module) but defined nowhere in this module is a reach-in."""
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        defined = _defined_names(tree)
        foreign = _third_party_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr) or node.attr in defined:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in foreign:
                continue
            offenders.append(f"{path.relative_to(REPO)}:{node.lineno} uses {ast.unparse(node)}")
    assert not offenders, "use a public method or a signal instead:\n" + "\n".join(offenders)


# Classes over MAX_CLASS_LINES counting what they inherit from this project, each with its reason.
# The entries are stale (and the test below fails) once a class is back under the limit.
CLASS_SIZE_EXCEPTIONS: dict[str, str] = {
}


def _class_sizes() -> dict[str, int]:
    return class_sizes("app/")


def test_app_modules_and_classes_stay_readable_in_size() -> None:
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        lines = path.read_text().count("\n")
        if lines > MAX_FILE_LINES:
            offenders.append(f"{path.relative_to(REPO)}: {lines} lines (> {MAX_FILE_LINES})")
    for name, n in sorted(_class_sizes().items()):
        if n > MAX_CLASS_LINES and name not in CLASS_SIZE_EXCEPTIONS:
            offenders.append(f"class {name}: {n} lines with its in-project bases (> {MAX_CLASS_LINES})")
    assert not offenders, "split by responsibility (compose parts, not mixins):\n" + "\n".join(offenders)


def test_the_class_size_exceptions_are_still_needed() -> None:
    sizes = _class_sizes()
    stale = [name for name in CLASS_SIZE_EXCEPTIONS if sizes.get(name, 0) <= MAX_CLASS_LINES]
    assert not stale, f"remove these from CLASS_SIZE_EXCEPTIONS: {stale}"


def test_a_class_counts_with_what_it_inherits_from_the_project() -> None:
    """The mixin stack that once hid TimelineView's 1,063 lines is counted as one class."""
    classes = {
        "a.py:Part": (200, []),
        "b.py:Other": (150, []),
        "c.py:View": (40, ["a.py:Part", "b.py:Other"]),
        "d.py:Sub": (10, ["c.py:View", "a.py:Part"]),
    }
    assert inherited_lines(classes, "c.py:View") == 390
    assert inherited_lines(classes, "d.py:Sub") == 400  # Part counted once


# Mixins that still declare, under TYPE_CHECKING, what the class they are mixed into provides.
TYPE_CHECKING_MIXINS: dict[str, str] = {
}


def _classes_declaring_others_under_type_checking() -> set[str]:
    out = set()
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test) for n in node.body
            ):
                out.add(f"{path.relative_to(REPO)}:{node.name}")
    return out


def test_no_app_class_declares_its_siblings_attributes_under_type_checking() -> None:
    """A part holds what it works on; a class body with ``if TYPE_CHECKING:`` declaring the methods
    another mixin provides is a split on paper only."""
    found = _classes_declaring_others_under_type_checking()
    new = sorted(found - set(TYPE_CHECKING_MIXINS))
    assert not new, "compose parts instead of declaring each other's attributes:\n" + "\n".join(new)
    stale = sorted(set(TYPE_CHECKING_MIXINS) - found)
    assert not stale, f"remove these from TYPE_CHECKING_MIXINS: {stale}"
