"""``memstore serve --workers 2``: two gateway processes on one port share a
PostgreSQL store; clients capture and end sessions at once through HTTP and
nothing is lost or derived twice. On SQLite more than one worker is refused
with a message saying why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive.events import L1Extracted
from memstore.store import Store
from tests.derive_support import ScriptedLLM

USERS, SESSIONS, ROUNDS = 3, 2, 6


def _env(target: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update(
        MEMSTORE_DB=target,
        MEMSTORE_EMBEDDER="hashing",
        MEMSTORE_CONFIG=str(tmp_path / "none.toml"),
        **extra,
    )
    return env


def _workers(pid: int) -> set[int]:
    """The gateway worker processes of a ``serve`` (not multiprocessing's
    resource tracker, its other child)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for c in (task / "children").read_text().split():
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes():
                out.add(int(c))
    return out


@pytest.mark.slow
def test_two_gateway_processes_capture_and_derive_once(
    target: str, backend: str, settings: Settings, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "memstore", "serve", "--port", "0", "--workers", "2"]
    if backend == "sqlite":
        done = subprocess.run(
            cmd, env=_env(target, tmp_path), capture_output=True, text=True, timeout=120
        )
        assert done.returncode != 0
        assert "--workers 2 needs PostgreSQL" in done.stderr
        assert not Path(target).exists()  # refused before anything was created
        return
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        env = _env(
            target,
            tmp_path,
            MEMSTORE_LLM_BASE_URL=fake.base_url,
            MEMSTORE_LLM_MODEL="fake-model",
            MEMSTORE_LLM_API_KEY="x",
            MEMSTORE_LLM_MAX_RETRIES="1",
        )
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert "gateway on" in line and "2 worker processes" in line, line
            url = line.split("gateway on ", 1)[1].split()[0]
            workers = _workers(proc.pid)
            assert len(workers) == 2
            errors: list[BaseException] = []

            def talk(user: str, session: str) -> None:
                try:
                    # A fresh connection per request, so the kernel may hand
                    # each to either worker.
                    for r in range(ROUNDS):
                        msgs = [
                            {"role": "user", "content": f"I live in Berlin ({session} {r})",
                             "id": uuid.uuid4().hex},
                            {"role": "assistant", "content": "noted", "id": uuid.uuid4().hex},
                        ]  # fmt: skip
                        body = {"user_id": user, "session_id": session, "messages": msgs}
                        httpx.post(f"{url}/v1/capture", json=body, timeout=60).raise_for_status()
                    end = httpx.post(f"{url}/v1/users/{user}/sessions/{session}/end", timeout=120)
                    end.raise_for_status()
                except BaseException as e:  # reported in the test's thread
                    errors.append(e)

            threads = [
                threading.Thread(target=talk, args=(f"u{u}", f"s{s}"))
                for u in range(USERS)
                for s in range(SESSIONS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            assert not errors, errors
            with Store.open(target, settings=settings) as store:
                with store._db.read() as conn:
                    connected = {
                        str(r[0])
                        for r in conn.exec_driver_sql(
                            "SELECT application_name FROM pg_stat_activity "
                            "WHERE datname = current_database()"
                        )
                    }
                    captured = {
                        str(r[0])
                        for r in conn.exec_driver_sql(
                            "SELECT message_id FROM l0_messages WHERE role = 'user'"
                        )
                    }
                # Both worker processes hold connections to the store.
                assert {f"memstore:{pid}" for pid in workers} <= connected
                assert len(captured) == USERS * SESSIONS * ROUNDS  # nothing lost
                extracted: list[str] = []
                cursors: list[tuple[str, str, int, int]] = []
                for e in store.read_events(types=[L1Extracted.TYPE]):
                    assert isinstance(e.payload, L1Extracted)
                    extracted += e.payload.message_ids
                    p = e.payload
                    cursors.append((e.user_id, p.session_id, p.generation, p.cursor_position))
                assert len(extracted) == len(set(extracted))  # nothing derived twice
                assert len(cursors) == len(set(cursors))
                assert captured <= set(extracted)  # every session end extracted its rest
                for st in store.pipeline_status():
                    assert all(s["messages_pending"] == 0 for s in st["sessions"])
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
            rest = proc.stderr.read()
            assert rc == 0, rest
            assert "stopped" in rest and "Traceback" not in rest, rest
            assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in workers if "workers" in locals() else ():
                if Path(f"/proc/{pid}").exists():
                    os.kill(pid, signal.SIGKILL)
