"""Screenshots of the memory inspector for the docs (docs/img/inspector-*.png).

Seeds a small store in a temporary folder (offline rules, no LLM), serves
the gateway on a free loopback port and photographs the main pages with the
distribution's headless Chromium through Playwright:

    .venv/bin/python scripts/inspector_screenshots.py [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

from memstore import Settings
from memstore.gateway.config import GatewayConfig
from memstore.gateway.server import bind, make_server
from memstore.store import Store

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"
SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
TURNS = [
    ("s-2024-03-02", "2024-03-02T18:10:00Z", [
        ("user", "Hi! My name is Dana and I work as a nurse in Lisbon."),
        ("assistant", "Nice to meet you, Dana. How can I help?"),
        ("user", "I love hiking and I am allergic to peanuts, so keep that in mind for recipes."),
        ("assistant", "Got it: no peanuts. Any favourite trails?"),
    ]),
    ("s-2024-03-09", "2024-03-09T09:30:00Z", [
        ("user", "I moved to Porto last week. Always answer in English, please."),
        ("assistant", "Congratulations on the move! I will answer in English."),
        ("user", "I like running too, I am training for a half marathon."),
    ]),
]  # fmt: skip


def seed(db: Path) -> None:
    with Store.open(db, settings=SETTINGS) as store:
        for session, at, turns in TURNS:
            store.capture("dana", session, [
                {"role": role, "content": text, "timestamp": at, "id": f"m{i}"}
                for i, (role, text) in enumerate(turns, 1)
            ])  # fmt: skip
        store.capture("sam", "s1", [{"role": "user", "content": "I play the cello."}])
        store.run_pipeline()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"
        seed(db)
        sock = bind("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = make_server(db, GatewayConfig(port=0), SETTINGS, drain_s=2)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            store: Store = server.config.app.app.state.store
            [mem] = [m for m in store.list_memories("dana") if "peanuts" in m["content"]]
            OUT.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1100, "height": 760})
                shots = {
                    "users": "/ui/",
                    "user": "/ui/user?u=dana",
                    "memory": f"/ui/memory?u=dana&m={quote(mem['memory_id'])}",
                    "recall": "/ui/recall?u=dana&q=" + quote("is the user allergic to peanuts?"),
                }
                for name, path in shots.items():
                    page.goto(url + path)
                    page.screenshot(path=str(OUT / f"inspector-{name}.png"), full_page=True)
                    print(OUT / f"inspector-{name}.png")
                phone = browser.new_page(viewport={"width": 390, "height": 844})
                phone.goto(url + shots["memory"])
                phone.screenshot(path=str(OUT / "inspector-phone.png"))
                print(OUT / "inspector-phone.png")
                browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()


if __name__ == "__main__":
    main()
