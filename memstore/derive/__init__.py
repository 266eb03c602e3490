"""Derivation: L1 memories, L2 scenes and the L3 persona, recorded as events.

One folder per concept, each with its prompts, rules, projection and run:
``memories/`` (L1: extract + dedup), ``scenes/`` (L2), ``persona/`` (L3).
Beside them: ``events`` (the outcomes, as event types), ``queries`` (reads of
the derived tables), ``runs`` (outcomes, the checked append), ``context``
(what derivation is handed), ``generations`` (re-derive), ``api`` (the
functions the Store, the pipeline and the CLI call). Recall, the read path,
is ``memstore/recall/``; ``memstore.event_types`` lists the event types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstore.derive import events as events

if TYPE_CHECKING:
    from memstore.projections.base import Projection


def derive_projections() -> list[Projection]:
    """The derivation projections (the registry orders them by ``depends_on``)."""
    # Imported here: a read of the derived tables (``derive.queries``, which
    # ``memstore memories list`` uses) loads this package without needing them.
    from memstore.derive.memories.projection import (
        CursorsProjection,
        FailuresProjection,
        GenerationsProjection,
        L1Projection,
    )
    from memstore.derive.persona.projection import L3Projection
    from memstore.derive.scenes.projection import L2Projection

    return [
        GenerationsProjection(),
        L1Projection(),
        CursorsProjection(),
        L2Projection(),
        L3Projection(),
        FailuresProjection(),
    ]


__all__ = ["derive_projections", "events"]
