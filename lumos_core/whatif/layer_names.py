"""Layer numbers in forward-layer annotation names (shared by baseline inference and the layer
segmentation of a rank)."""

from __future__ import annotations

import re

# Forward-layer annotations: "layer.3", "decoder.layers.3", "model.layers.3", "h.3", "blocks.3",
# "nn.Module: Block_3" / "TransformerLayer_3" (with_modules). Backward copies end in ".backward".
_LAYER_NAME = re.compile(
    r"^(?:nn\.Module: )?(?:[\w.]*\.)?(?:layers?|h|blocks?|block)[._](\d+)$|^nn\.Module: \w*(?:Block|Layer)_(\d+)$"
)


def layer_index(name: str) -> int | None:
    """The layer number in a forward-layer annotation name, else None.

    >>> layer_index("decoder.layers.11"), layer_index("layer.0"), layer_index("nn.Module: Block_3")
    (11, 0, 3)
    >>> layer_index("decoder.layers.1.backward") is None, layer_index("recompute.decoder.layers.1") is None
    (True, True)
    """
    if name.startswith("recompute."):  # a forward re-run inside the backward (activation recomputation)
        return None
    m = _LAYER_NAME.match(name)
    if not m:
        return None
    return int(m.group(1) if m.group(1) is not None else m.group(2))
