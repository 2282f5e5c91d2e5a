"""Results as pandas DataFrames. pandas is an optional dependency (``pip install "lumos[pandas]"``):
it is imported when a table is asked for, never by ``import lumos_core``."""

from __future__ import annotations

from typing import Any

from lumos_core.errors import LumosError

PANDAS_MISSING = (
    'to_pandas() needs pandas, which is not installed: pip install pandas (or pip install "lumos[pandas]"); '
    "to_dict() gives the same figures without it"
)


def frame(rows: list[dict[str, Any]], columns: list[str] | None = None) -> Any:
    """``rows`` (one dict per row) as a DataFrame; raises LumosError naming the fix without pandas."""
    try:
        import pandas as pd
    except ImportError:
        raise LumosError(PANDAS_MISSING) from None
    return pd.DataFrame.from_records(rows, columns=columns)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a_b": 1}`` (nested dicts become columns)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}_"))
        else:
            out[key] = v
    return out
