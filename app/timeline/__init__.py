"""The timeline: rows per rank and stream, drawn spans, predicted overlays."""
