"""The knobs of issue 26 (recompute, vp, sp, cp, kv_heads, mlp) in the app's What-if form, generated from
the knob registry: each has its field in its group, shows the traced value, and setting it in the
form and pressing Estimate produces a prediction that differs from the baseline replay, with the
note of the rule that re-timed it. On the SYNTHETIC demo job (TP2 x PP2 x DP2, 8 layers, 4
microbatches: our own cost models, so this checks the wiring, not accuracy). No shared traces."""

from __future__ import annotations

import pytest
from app_helpers import wait_loaded
from PySide6.QtWidgets import QComboBox, QLineEdit

from app.whatif.config_panel import GROUPS

pytest_plugins = ["app_fixtures"]  # isolated QSettings


def test_the_new_knobs_have_their_fields_in_the_form(demo) -> None:
    panel = demo.workbench.panel
    where = {name: title for title, knobs in GROUPS for name, _, _ in knobs}
    assert where["vp"] == where["sp"] == where["cp"] == "Parallelism"
    assert where["kv_heads"] == where["mlp"] == "Model" and where["recompute"] == "Memory"
    assert isinstance(panel.editors["sp"], QComboBox) and isinstance(panel.editors["recompute"], QComboBox)
    assert isinstance(panel.editors["vp"], QLineEdit) and isinstance(panel.editors["kv_heads"], QLineEdit)
    # the traced values are shown beside the fields (recorded by lumos synth in the demo job)
    assert panel.trace_cells["kv_heads"].text() == "32"
    assert panel.trace_cells["recompute"].text() == "none"


def _set(panel, knob: str, value) -> None:  # type: ignore[no-untyped-def]
    panel.reset()
    editor = panel.editors[knob]
    if isinstance(editor, QComboBox):
        i = editor.findData(value)
        assert i >= 0, (knob, value)
        editor.setCurrentIndex(i)
    else:
        editor.setText(str(value))
    assert panel.validate() == [], panel.found


@pytest.mark.parametrize(
    ("knob", "value", "rule"),
    [
        ("recompute", "full", "rule recompute"),
        ("vp", 2, "vp=2 (rewrite)"),
        ("sp", True, "rule sp"),
        ("cp", 2, "rule cp"),
        ("kv_heads", 8, "rule compute"),
        ("mlp", "swiglu", "mlp=swiglu (rule compute"),
    ],
)
def test_setting_a_new_knob_in_the_form_changes_the_prediction(demo, qtbot, knob, value, rule) -> None:  # type: ignore[no-untyped-def]
    panel, wb = demo.workbench.panel, demo.workbench
    _set(panel, knob, value)
    assert panel.changes() == {knob: value}
    if knob == "cp":  # the GPU count follows: DP x TP x PP x CP
        assert "16 GPUs (DP 2 × TP 2 × PP 2 × CP 2)" in panel.world_label.text()
    with qtbot.waitSignal(wb.scenario_added, timeout=180_000) as got:
        panel.estimate_button.click()
    wait_loaded(demo)
    s = got.args[0]
    assert s.summary.changes == {knob: value}
    assert abs(s.summary.change_pct) > 0.5, s.summary.change_pct
    assert any(rule in n for n in s.summary.notes), s.summary.notes


def test_the_trace_column_takes_the_words_of_yes_no_and_choice_knobs(qapp) -> None:  # type: ignore[no-untyped-def]
    """SP, MLP and recompute are overridable: their "in the trace" field had a whole-number
    validator, so "true", "swiglu" or "selective" could not be typed, and "false" showed as
    "alse" in a field too narrow for it."""
    from PySide6.QtGui import QValidator

    from app.whatif.knob_group import KnobGroup

    group = KnobGroup("t", [(k, k, "") for k in ("microbatches", "sp", "mlp", "recompute")])
    cells = group.trace_cells

    def state(knob: str, text: str) -> QValidator.State:
        return cells[knob].validator().validate(text, len(text))[0]

    acceptable = QValidator.State.Acceptable
    assert state("microbatches", "4") == acceptable and state("microbatches", "x") != acceptable
    for knob, text in (("sp", "true"), ("sp", "False"), ("mlp", "swiglu"), ("recompute", "selective")):
        assert state(knob, text) == acceptable, (knob, text)
    assert state("sp", "maybe") == QValidator.State.Invalid
    fm = cells["sp"].fontMetrics()
    assert cells["sp"].minimumWidth() > fm.horizontalAdvance("false")
    assert cells["recompute"].minimumWidth() > fm.horizontalAdvance("selective")
