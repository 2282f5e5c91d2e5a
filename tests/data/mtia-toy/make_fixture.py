"""Writes mtia_rank_0.json: a small trace of our own in the shape MTIA traces take in Kineto
(categories ``mtia_runtime`` for host runtime calls, ``mtia_ccp_events`` for on-device activity,
the launch call HTA keys MTIA launches on, ``args.stream``/``args.correlation`` linking them), 4
profiler steps, a compute stream and a copy stream. Deterministic; run to regenerate."""

from __future__ import annotations

import json
from pathlib import Path

LAUNCH = "runFunction - job_prep_and_submit_for_execution"


def events() -> list[dict]:
    ev: list[dict] = []
    corr = 400
    t = 1_000.0
    for step in range(4):
        start = t
        for i in range(6):
            corr += 1
            name = f"fused_graph_{i % 3}"
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 11, "tid": 11, "ts": t,
                       "dur": 40.0, "args": {}})
            ev.append({"ph": "X", "cat": "mtia_runtime", "name": LAUNCH, "pid": 11, "tid": 11, "ts": t + 2.5,
                       "dur": 30.25, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": 1, "tid": 1,
                       "ts": t + 35.125, "dur": 55.5 + 10 * (i % 2),
                       "args": {"stream": 1, "correlation": corr, "device": 0}})
            t += 100.0
        for _j in range(2):
            corr += 1
            ev.append({"ph": "X", "cat": "mtia_runtime", "name": LAUNCH, "pid": 11, "tid": 11, "ts": t,
                       "dur": 20.0, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "mtia_ccp_events", "name": "Memcpy DtoH (Device -> Host)", "pid": 1,
                       "tid": 102, "ts": t + 25.0, "dur": 30.0,
                       "args": {"stream": 102, "correlation": corr, "device": 0}})
            t += 60.0
        t += 80.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 11, "tid": 11,
                   "ts": start, "dur": t - start, "args": {}})
    ev.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "MTIA device 0"}})
    return ev


def main() -> None:
    doc = {"schemaVersion": 1, "traceEvents": events(), "distributedInfo": {"rank": 0, "world_size": 1}}
    Path(__file__).with_name("mtia_rank_0.json").write_text(json.dumps(doc, indent=0))


if __name__ == "__main__":
    main()
