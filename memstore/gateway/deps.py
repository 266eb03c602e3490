"""What routes receive: the process's one store."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from memstore.errors import StorageError
from memstore.store import Store


class NotServing(StorageError):
    """The store is not open: the gateway is starting or shutting down (503)."""


async def current_store(request: Request) -> Store:
    # async: FastAPI runs a plain ``def`` dependency on a worker thread, a
    # hand-off per request for an attribute read (memstore.gateway.offload).
    store: Store | None = getattr(request.app.state, "store", None)
    if store is None:
        raise NotServing("the gateway's store is not open (starting or shutting down)")
    return store


StoreDep = Annotated[Store, Depends(current_store)]

__all__ = ["NotServing", "StoreDep", "current_store"]
