"""What hosts that build an agent per request need: shared stores and a session registry.

``SharedStores`` (one process-wide instance behind ``acquire`` / ``acquire_store``)
    One open ``Store`` per database file per process, reference-counted; host
    objects hold a lease and nothing else (``memstore.hosts.stores``).

``SessionRegistry``
    One long-lived object per session between requests: exclusive check-out /
    check-in, LRU bound, idle TTL, eviction drained off the caller's thread
    (``memstore.hosts.sessions``).
"""

from memstore.hosts.sessions import SessionRegistry, drain_and_shutdown
from memstore.hosts.stores import (
    DEFAULT_LINGER_S,
    SharedStores,
    StoreLease,
    acquire,
    acquire_store,
    release_store,
    shared_stores,
    store_key,
)

__all__ = [
    "DEFAULT_LINGER_S",
    "SessionRegistry",
    "SharedStores",
    "StoreLease",
    "acquire",
    "acquire_store",
    "drain_and_shutdown",
    "release_store",
    "shared_stores",
    "store_key",
]
