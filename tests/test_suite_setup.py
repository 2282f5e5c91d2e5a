"""How the suite runs: .ci/run runs exactly the README's test command, the suite spreads over every
core (pytest-xdist), and the tests that must share one worker are named by paths that exist (a
renamed file would otherwise silently leave its group and run beside the others)."""

from __future__ import annotations

import ast
import re

from conftest import REPO, SERIAL_GROUPS, serial_group

README_COMMAND = (
    'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && .venv/bin/python -m pytest'
)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert README_COMMAND in (REPO / "README.md").read_text()
    run = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert any(line.startswith(README_COMMAND + " ||") or line == README_COMMAND for line in run)


def test_the_suite_runs_on_every_core() -> None:
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; the project supports 3.10)
    addopts = re.search(r'^addopts = "(.*)"$', text, re.M)
    assert addopts and "-n auto" in addopts.group(1)
    assert re.search(r'^\s*"pytest-xdist>=', text, re.M), "pytest-xdist belongs in the test extra"


def test_every_serial_group_member_exists() -> None:
    for group, members in SERIAL_GROUPS.items():
        for member in members:
            file, _, test = member.partition("::")
            path = REPO / "tests" / file
            assert path.is_file(), f"{group}: {file} does not exist"
            if test:
                names = {
                    n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)
                }
                assert test in names, f"{group}: {member} does not exist"


def test_serial_groups_match_node_ids() -> None:
    xcb = "tests/test_app_xcb_smoke.py::test_app_on_a_real_x_server[2]"
    assert serial_group(xcb) == "xcb"
    assert serial_group("tests/test_sweep_ray.py::test_ray_and_the_process_pool_give_identical_rows") == "ray"
    dialog = (
        "tests/test_app_sweep_dialog.py::test_the_ray_engine_gives_identical_rows_and_stops_with_the_dialog"
    )
    assert serial_group(dialog) == "ray"
    assert (
        serial_group("tests/test_app_sweep_dialog.py::test_cancel_stops_the_sweep_and_its_worker_processes")
        is None
    )
    assert (
        serial_group(
            "tests/test_kernels.py::test_kahn_on_a_large_graph_whose_times_run_against_its_dependencies"
        )
        is None
    )
