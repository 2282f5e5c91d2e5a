"""Old import path, kept for users' scripts: estimation moved to :mod:`lumos_core.whatif.estimate`."""

from lumos_core.whatif.estimate import ESTIMATE_DEFINITION, EstimateResult, Outcome, estimate

__all__ = ["ESTIMATE_DEFINITION", "EstimateResult", "Outcome", "estimate"]
