"""Is the owner of a lock still alive?

Lock and lease owners are ``host:pid:instance[:thread]``. A process killed
while it held a session's lock used to block that session until the TTL ran
out (15 minutes). On the same host a dead owner is seen at once: its pid is
gone (or a zombie), or, for an owner in this very process, its
``PipelineService`` was closed. Owners on other hosts cannot be checked and
are trusted until their lock expires; live workers renew theirs every
``ttl / 3``, so the TTL can be short.
"""

from __future__ import annotations

import os
import socket
import threading

HOST = socket.gethostname()

_live: set[str] = set()
_live_lock = threading.Lock()


def new_instance(instance: str) -> str:
    """The owner prefix of one service in this process (alive until ``retire``)."""
    prefix = f"{HOST}:{os.getpid()}:{instance}"
    with _live_lock:
        _live.add(prefix)
    return prefix


def retire(prefix: str) -> None:
    with _live_lock:
        _live.discard(prefix)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            # "pid (comm) state ...": a killed child not yet reaped is a zombie.
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def is_dead(owner: str) -> bool:
    """True only when ``owner`` certainly no longer runs (never a guess)."""
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != HOST or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid != os.getpid():
        return not _pid_alive(pid)
    prefix = ":".join(parts[:3])
    with _live_lock:
        return prefix not in _live


def is_local(owner: str) -> bool:
    """True when ``owner`` is a worker of this very process."""
    parts = owner.split(":")
    return len(parts) >= 3 and parts[0] == HOST and parts[1] == str(os.getpid())


__all__ = ["HOST", "is_dead", "is_local", "new_instance", "retire"]
