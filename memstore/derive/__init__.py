"""Derivation: L1 memories, L2 scenes and the L3 persona, recorded as events.

Importing this package registers the derivation event types. The public
functions live in :mod:`memstore.derive.api`; the projections in
:func:`memstore.derive.projections_l23.derive_projections`.
"""

from memstore.derive import events as events  # registers the event types
from memstore.derive.projections_l23 import derive_projections

__all__ = ["derive_projections", "events"]
