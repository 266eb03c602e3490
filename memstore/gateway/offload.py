"""Where the routes a host calls on every turn run their store calls.

FastAPI runs a route written as ``def`` on anyio's worker threads, and with
it the validation of that route's response: each request then crosses from
the event loop to a thread and back more than once, and each crossing wakes
a thread that must take the interpreter lock. Under fifty clients that was
most of the gateway's CPU per capture, more than the capture itself.

Capture, recall and search are ``async`` routes instead: the request is
parsed, validated and answered on the event loop. A capture is queued with
``Store.submit_capture`` and awaited, committed by the store's writer thread
with whatever else is queued (memstore.events.groupcommit): no thread waits
for it. Recall and search hand their store call to a pool of their own
(``TURN_THREADS``): sixteen threads, not the forty of anyio's default, whose
lock contention cost more than they gave, and apart from the slow routes (a
session end waiting for its derivation, a seed import), which stay ``def``
routes on anyio's threads and so cannot take the threads recall needs.

The pool belongs to the app's lifespan: created once the store is open and
shut down, waiting for the calls still running, before the store closes. A
request cancelled while its call runs (a client that went away, a shutdown
past its drain time) thus never leaves a call reading a closed store; a
capture's queue is drained by ``Store.close`` itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import ParamSpec, TypeVar

from memstore.gateway.deps import NotServing

P = ParamSpec("P")
R = TypeVar("R")

TURN_THREADS = 16

# One pool per event loop serving an app (uvicorn runs one; a test client
# runs one per app it starts).
_POOLS: dict[asyncio.AbstractEventLoop, ThreadPoolExecutor] = {}


@asynccontextmanager
async def turn_pool(threads: int = TURN_THREADS) -> AsyncIterator[ThreadPoolExecutor]:
    """The pool ``in_turn_pool`` uses on this event loop, for the lifespan."""
    loop = asyncio.get_running_loop()
    if loop in _POOLS:
        raise RuntimeError("this event loop already serves a memstore app")
    pool = ThreadPoolExecutor(threads, thread_name_prefix="memstore-turn")
    _POOLS[loop] = pool
    try:
        yield pool
    finally:
        del _POOLS[loop]
        # Waits for the calls still running, without blocking the loop.
        await asyncio.to_thread(pool.shutdown, wait=True)


async def in_turn_pool(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on the turn pool, awaited."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        raise NotServing("the gateway is starting or shutting down")
    # The caller's context variables, as anyio's threads would have them.
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    try:
        fut = pool.submit(call)
    except RuntimeError as e:  # shut down between the lookup and the submit
        raise NotServing("the gateway is shutting down") from e
    return await asyncio.wrap_future(fut, loop=loop)


__all__ = ["TURN_THREADS", "in_turn_pool", "turn_pool"]
