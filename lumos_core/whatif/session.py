"""A saved app session: which traces, which baseline values the user gave, which scenarios.

A small, hand-editable JSON file::

    {
      "format": "lumos-session", "version": 1,
      "trace": {"path": "/data/run-42"},            # or {"demo": true}
      "baseline_overrides": {"layers": 12},
      "scenarios": [
        {"name": "baseline replay", "kind": "replay", "changes": {}},
        {"name": "DP 16", "kind": "estimate", "changes": {"dp": 16}}
      ],
      "view": {"selected": "DP 16", "compare": ["baseline replay", "DP 16"], "overlay": "paired"}
    }

Only configurations are saved, never results: reopening recomputes every scenario from the traces
(the numbers then follow the current engine). A trace path is stored absolute and, when the
session file sits near the traces, also relative to the session file, so a folder of traces and
sessions can be moved together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lumos_core.errors import LumosError
from lumos_core.whatif.knobs import OVERRIDABLE, coerce_changes

FORMAT = "lumos-session"
VERSION = 1
SUFFIX = ".lumos.json"
KINDS = ("replay", "estimate")


class SessionError(LumosError):
    """A session file cannot be read (not JSON, not a session, bad values)."""


@dataclass
class ScenarioSpec:
    name: str
    kind: str = "estimate"  # "replay" (the baseline replay) or "estimate"
    changes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "changes": dict(self.changes)}


@dataclass
class Session:
    trace_path: str | None = None  # None for the demo job
    demo: bool = False
    baseline_overrides: dict[str, Any] = field(default_factory=dict)
    scenarios: list[ScenarioSpec] = field(default_factory=list)
    view: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, relative_to: Path | None = None) -> dict[str, Any]:
        trace: dict[str, Any] = {"demo": True} if self.demo else {"path": self.trace_path}
        if not self.demo and self.trace_path and relative_to is not None:
            try:
                trace["relative"] = os.path.relpath(self.trace_path, relative_to)
            except ValueError:  # another drive (Windows)
                pass
        return {
            "format": FORMAT,
            "version": VERSION,
            "trace": trace,
            "baseline_overrides": dict(self.baseline_overrides),
            "scenarios": [s.as_dict() for s in self.scenarios],
            "view": dict(self.view),
        }


def save_session(session: Session, path: str | Path) -> Path:
    """Write ``session`` as JSON (atomically: a crash never leaves half a file)."""
    path = Path(path)
    doc = session.as_dict(relative_to=path.resolve().parent)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    os.replace(tmp, path)
    return path


def load_session(path: str | Path) -> Session:
    """Read a session file; raises :class:`SessionError` saying what is wrong."""
    path = Path(path)
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise SessionError(f"{path}: no such session file") from None
    except OSError as exc:
        raise SessionError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise SessionError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SessionError(f'{path}: not a Lumos session (no "format": "{FORMAT}")')
    version = doc.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise SessionError(f"{path}: session version {version!r} is newer than this Lumos ({VERSION})")
    trace = doc.get("trace")
    if not isinstance(trace, dict):
        raise SessionError(f'{path}: "trace" must be an object with a "path" (or "demo": true)')
    demo = bool(trace.get("demo"))
    trace_path = None if demo else _resolve_trace(path, trace)
    try:
        overrides = coerce_changes(dict(doc.get("baseline_overrides") or {}))
    except LumosError as exc:
        raise SessionError(f"{path}: baseline_overrides: {exc}") from None
    bad = sorted(set(overrides) - set(OVERRIDABLE))
    if bad:
        raise SessionError(
            f"{path}: baseline_overrides cannot set {', '.join(bad)} (only {', '.join(OVERRIDABLE)})"
        )
    scenarios = []
    items = doc.get("scenarios") or []
    if not isinstance(items, list):
        raise SessionError(f'{path}: "scenarios" must be a list')
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise SessionError(f"{path}: scenario {k + 1} is not an object")
        kind = item.get("kind", "estimate")
        if kind not in KINDS:
            raise SessionError(
                f"{path}: scenario {k + 1}: kind must be one of {', '.join(KINDS)}, not {kind!r}"
            )
        try:
            changes = coerce_changes(dict(item.get("changes") or {}))
        except LumosError as exc:
            raise SessionError(f"{path}: scenario {k + 1}: {exc}") from None
        name = str(item.get("name") or f"scenario {k + 1}")
        scenarios.append(ScenarioSpec(name, kind, changes))
    view = doc.get("view") if isinstance(doc.get("view"), dict) else {}
    return Session(trace_path, demo, overrides, scenarios, dict(view))


def _resolve_trace(session_file: Path, trace: dict[str, Any]) -> str:
    absolute = trace.get("path")
    relative = trace.get("relative")
    if not isinstance(absolute, str) and not isinstance(relative, str):
        raise SessionError(f'{session_file}: "trace" has no "path"')
    if isinstance(absolute, str) and Path(absolute).exists():
        return absolute
    if isinstance(relative, str):
        candidate = (session_file.resolve().parent / relative).resolve()
        if candidate.exists():
            return str(candidate)
    return str(absolute if isinstance(absolute, str) else relative)
