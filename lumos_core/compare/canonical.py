"""Names that stay the same when a job is recompiled: what ``lumos diff`` matches kernels and operators by.

``torch.compile`` numbers what it generates, and the numbers change when nothing else did: a frame
compiled earlier (another model change, a different warm-up) turns "Torch-Compiled Region: 5/0" into
"8/0" and "CompiledFunction 5/0" likewise; Inductor's Triton kernels end in their index within the
generated graph ("triton_poi_fused__to_copy_t_8"), which moves when another kernel is fused before
them; the "## Call CompiledFxGraph <hash> ##" annotations carry a hash of the generated code. Matched
by their raw names, a recompiled job would show every such row as vanished and a renumbered twin as
appeared. :func:`canonical_name` replaces the numbers and hashes with ``#``, so the rows of the two
jobs meet; distinct kernels that only differed by their index are pooled, which is the right unit for
a diff (the same fused body, wherever Inductor put it).
"""

from __future__ import annotations

import re
from functools import lru_cache

# "Torch-Compiled Region: 5/0", "CompiledFunction 5/0", "CompiledFunctionBackward 12/3": frame/recompile
_REGION = re.compile(r"(?i)(compiled[\w -]*?[: ]\s*)\d+/\d+")
# "## Call CompiledFxGraph fmjx4tvj25tl... ##": a hash of the generated code
_FX_GRAPH = re.compile(r"(CompiledFxGraph)\s+[0-9a-z]{16,}")
# Inductor's kernels: "triton_poi_fused_..._8", "triton_red_fused_..._3.kd" (ROCm), "triton_tem_fused_mm_0"
_TRITON = re.compile(r"^(triton_[A-Za-z0-9_]*?)_\d+(?=$|[^0-9A-Za-z_])")


@lru_cache(maxsize=1 << 16)
def canonical_name(name: str) -> str:
    """``name`` with torch.compile's region numbers, graph hashes and Triton kernel indices as ``#``."""
    if "ompiled" in name or "COMPILED" in name:
        name = _REGION.sub(r"\1#/#", name)
        name = _FX_GRAPH.sub(r"\1 #", name)
    if name.startswith("triton_"):
        name = _TRITON.sub(r"\1_#", name)
    return name


def search_text(canonical: str) -> str:
    """The part of a canonical name a substring search of the raw names finds: up to the first ``#``
    (the raw names carry a number there)."""
    head = _PLACEHOLDER.split(canonical, 1)[0]
    return head.rstrip("_ /:") if head != canonical else canonical


_PLACEHOLDER = re.compile(r"(?<=[ _:/])#")
