"""Trees of Tasks, as the run service and its front ends name them: the vocabulary lives in
engine/delegation.py (the step loop delegates through it, and the engine imports nothing of
the runtime); this module is where the operator and `ordo run` import it from."""

from ..engine import delegation as _vocabulary
from ..engine.delegation import *  # noqa: F403  (the vocabulary, re-exported whole)

__all__ = _vocabulary.__all__
