"""``lumos inspect``: Kineto names a thread ``thread 155 (pt_autograd_0)``; the line, which starts
``thread 155``, does not print the id twice."""

from __future__ import annotations

from lumos_core.trace.inspect_report import thread_label


def test_kineto_thread_name_prefix_is_not_repeated() -> None:
    assert thread_label({"id": 155, "name": "thread 155 (pt_autograd_0)"}) == "(pt_autograd_0) "
    assert thread_label({"id": 82, "name": "thread 82 (python)"}) == "(python) "
    assert thread_label({"id": 1, "name": "python3"}) == "python3 "  # another name: kept
    assert thread_label({"id": 15, "name": "thread 155 (x)"}) == "thread 155 (x) "  # not its own id
    assert thread_label({"id": 7, "name": ""}) == ""
