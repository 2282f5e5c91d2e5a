"""Fixtures of the app tests, loaded by each test_app_* module with ``pytest_plugins``.

Kept apart from :mod:`app_helpers` because pytest must import a plugin module itself (to rewrite its
asserts) before anything else imports it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from app_helpers import close_window, make_window, wait_loaded
from PySide6.QtCore import QSettings

from app.gui_gc import GuiThreadCollector
from app.jobs import running_tasks
from app.main_window import MainWindow


@pytest.fixture(scope="session", autouse=True)
def _isolated_settings(tmp_path_factory: pytest.TempPathFactory) -> None:
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path_factory.mktemp("qsettings"))
    )


@pytest.fixture
def window(qtbot) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    w = make_window()
    qtbot.addWidget(w)
    yield w
    w.shutdown()
    assert not w.is_loading


def _loads_these_fixtures(module: object) -> bool:
    """``pytest_plugins`` in a test module registers this plugin for the whole session, so its
    autouse fixtures would reach every later module too (a CLI test would find automatic
    collection off and a QApplication it never asked for): they act only on the modules that load it."""
    plugins = getattr(module, "pytest_plugins", ())
    return "app_fixtures" in ([plugins] if isinstance(plugins, str) else plugins)


@pytest.fixture(scope="module")
def demo(qapp) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    """One window on the demo job, shared by a module's tests."""
    w = make_window()
    w.open_demo()
    wait_loaded(w)
    assert w.loaded is not None, w.last_error
    yield w
    close_window(w)


@pytest.fixture(scope="module", autouse=True)
def _collect_on_the_gui_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """As in the app (app/launch.py): while an app test module runs, cyclic garbage (closed
    windows, whose deleteLater no event loop processes here) is collected on the GUI thread only,
    never by a worker thread that happens to allocate. Automatic collection is back afterwards."""
    if not _loads_these_fixtures(request.module):
        yield
        return
    request.getfixturevalue("qapp")
    collector = GuiThreadCollector(interval_ms=200)
    collector.start()
    yield
    collector.stop()


@pytest.fixture(scope="module", autouse=True)
def _no_task_outlives_the_module(
    request: pytest.FixtureRequest, _collect_on_the_gui_thread: None
) -> Iterator[None]:
    """Every window a module opened is shut down by now (its fixtures are torn down first): no
    background task may still run. A thread left running is what the cyclic garbage collector
    could later destroy mid-run (a qFatal abort); this names it while its test is still known."""
    yield
    if not _loads_these_fixtures(request.module):
        return
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is not None:
        QApplication.processEvents()
    left = running_tasks()
    assert not left, f"background tasks still running after the module's windows closed: {left}"
