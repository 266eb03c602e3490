"""The memory inspector in a real Chromium: log in with the key, click from
the users through a memory to its source message and history, preview a
recall, forget a memory, switch generations; stored markup never runs,
forms refuse requests without the page's CSRF token, one user's data never
shows on another's page, and read-only mode offers no action."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore.store import Store
from tests.browser_support import browser  # noqa: F401  (the fixture)
from tests.gateway_support import Running, running_gateway
from tests.mcp_support import SETTINGS

pytestmark = [pytest.mark.slow, pytest.mark.browser]

KEY = "s3cret-key"
XSS_TEXTS = (
    "<script>window.__xss = 'script'</script> I keep bees",
    "<img src=x onerror=\"window.__xss = 'img'\"> my bees are called <b>Bzz</b>",
)


def seed(db: Path) -> None:
    at = "2023-05-08T10:00:00Z"
    with Store.open(db, settings=SETTINGS) as store:
        store.capture("alice", "s1", [
            {"role": "user", "id": "m1", "timestamp": at,
             "content": "My name is Dana and I love hiking. I am allergic to peanuts."},
            {"role": "assistant", "id": "m2", "timestamp": at, "content": "Noted, Dana!"},
        ])  # fmt: skip
        store.capture("alice", "s2", [
            {"role": "user", "id": "m1", "timestamp": "2023-06-01T09:00:00Z",
             "content": "I work as a nurse in Lisbon."},
        ])  # fmt: skip
        store.capture("bob", "s1", [
            {"role": "user", "id": "m1", "timestamp": at, "content": "I am allergic to cats."},
        ])  # fmt: skip
        store.capture("<b>mallory</b>", "<i>s</i>", [
            {"role": "user", "id": f"x{i}", "timestamp": at, "content": t}
            for i, t in enumerate(XSS_TEXTS)
        ])  # fmt: skip
        store.write_memory(
            "<b>mallory</b>", "add", "<img src=x onerror=\"window.__xss = 'memory'\"> likes bees"
        )
        store.run_pipeline()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    db = tmp_path_factory.mktemp("inspector") / "i.db"
    seed(db)
    with running_gateway(db, SETTINGS, api_key=KEY) as running:
        yield running


@pytest.fixture
def page(browser: Any, gw: Running) -> Iterator[Any]:  # noqa: F811
    ctx = browser.new_context()
    ctx.set_default_timeout(10_000)
    pg = ctx.new_page()
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    try:
        yield pg
    finally:
        ctx.close()


def login(page: Any, gw: Running, path: str = "/ui/") -> None:
    page.goto(gw.url + path)
    assert "/ui/login" in page.url
    page.fill("input[name=key]", KEY)
    page.click("button[type=submit]")


def memory_id(gw: Running, user: str, needle: str) -> str:
    store: Store = gw.store
    [m] = [m for m in store.list_memories(user, include_retired=True) if needle in m["content"]]
    return m["memory_id"]


def test_login_sets_a_strict_http_only_session(page: Any, gw: Running) -> None:
    page.goto(gw.url + "/ui/user?u=alice")
    assert "/ui/login" in page.url
    page.fill("input[name=key]", "wrong")
    page.click("button[type=submit]")
    assert "Wrong key" in page.inner_text("main")
    page.fill("input[name=key]", KEY)
    page.click("button[type=submit]")
    assert page.url.endswith("/ui/user?u=alice")  # back where the visitor was going
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert KEY not in cookie["value"]
    # The cookie opens the inspector only, never the API.
    assert page.request.get(gw.url + "/v1/users").status == 401


def test_click_from_users_to_a_memory_its_source_and_history(page: Any, gw: Running) -> None:
    login(page, gw)
    page.click("table.list a:text-is('alice')")
    assert "Persona" in page.inner_text("main")
    page.click("table.memories a:has-text('allergic to peanuts')")
    main = page.inner_text("main")
    assert "The user is allergic to peanuts." in main and "Health" in main
    history = page.inner_text("table.history")
    assert "store (created)" in history and "rules" in history
    sources = page.locator("li.source")
    assert sources.count() == 1  # its own session's m1, not s2's
    sources.locator("a").click()
    assert "/ui/session" in page.url and page.url.endswith("#msg-m1")
    target = page.locator("li.message:target")
    assert "allergic to peanuts" in target.inner_text()
    # ...and the message lists the memories made from it, which link back.
    target.locator("ul.produced a", has_text="peanuts").click()
    assert "/ui/memory" in page.url


def test_recall_preview_shows_what_is_injected_and_what_the_gate_dropped(
    page: Any, gw: Running
) -> None:
    login(page, gw, "/ui/recall?u=alice")
    page.fill("input[name=q]", "what is the user allergic to?")
    page.click("form.filters button")
    assert "peanuts" in page.inner_text("pre.stable")  # the persona
    assert "allergic to peanuts" in page.inner_text("pre.per-turn")
    rows = page.locator("table.candidates tbody tr")
    outcomes = [rows.nth(i).locator("td.outcome").inner_text() for i in range(rows.count())]
    assert "injected" in outcomes and "gated" in outcomes
    assert "below the gate" in page.locator("tr.gated").first.inner_text()
    page.fill("input[name=threshold]", "99")
    page.click("form.filters button")
    assert "Nothing passes the gate" in page.inner_text("main")
    assert page.locator("tr.injected").count() == 0


def test_forget_a_memory_and_see_it_gone(page: Any, gw: Running) -> None:
    mid = memory_id(gw, "alice", "hiking")
    login(page, gw, f"/ui/memory?u=alice&m={mid}")
    page.click("#forget")
    assert "/ui/user" in page.url
    assert f"Memory {mid} was forgotten" in page.inner_text("main")
    assert "The user likes hiking." not in page.inner_text("table.memories")
    page.goto(gw.url + f"/ui/memory?u=alice&m={mid}")
    assert "forgotten" in page.inner_text("dd.status") or "retired" in page.inner_text("dd.status")
    assert "forget" in page.inner_text("table.history")
    assert page.locator("#forget").count() == 0
    recall = gw.store.recall("alice", "does the user like hiking?")
    assert "hiking" not in recall.per_turn


def test_a_forgotten_memory_leaves_the_persona(page: Any, gw: Running) -> None:
    mid = memory_id(gw, "alice", "nurse")
    login(page, gw, f"/ui/memory?u=alice&m={mid}")
    page.click("#forget")
    assert "nurse" not in page.inner_text("pre.persona")
    assert "nurse" not in (gw.store.get_persona("alice") or "")


def test_stored_markup_is_shown_as_text_and_never_runs(page: Any, gw: Running) -> None:
    login(page, gw)
    page.click("table.list a:text-is('<b>mallory</b>')")
    page.click("a:text-is('<i>s</i>')")
    for t in XSS_TEXTS:
        assert t in page.inner_text("ol.messages")
    mid = memory_id(gw, "<b>mallory</b>", "bees")
    page.goto(gw.url + "/ui/user?u=%3Cb%3Emallory%3C%2Fb%3E")
    assert "onerror" in page.inner_text("table.memories")
    page.click("table.memories a:has-text('likes bees')")
    assert "window.__xss = 'memory'" in page.inner_text("blockquote.content")
    page.goto(gw.url + "/ui/recall?u=%3Cb%3Emallory%3C%2Fb%3E&q=bees")
    assert page.evaluate("window.__xss") is None
    assert page.locator("main img, main script, main b, main i").count() == 0
    assert page.dialogs == []
    assert mid


def test_forms_refuse_requests_without_the_pages_csrf_token(
    page: Any,
    gw: Running,
    browser: Any,  # noqa: F811
) -> None:
    mid = memory_id(gw, "bob", "cats")
    login(page, gw, f"/ui/memory?u=bob&m={mid}")
    token = page.get_attribute("input[name=csrf_token]", "value")
    assert token
    form = {"u": "bob", "m": mid}
    # The browser's own session, without or with a wrong token: refused.
    for extra in ({}, {"csrf_token": "0" * 64}):
        r = page.request.post(gw.url + "/ui/forget", form={**form, **extra})
        assert r.status == 403 and "CSRF" in r.text()
    # A token of another session does not work either.
    other = browser.new_context()
    try:
        p2 = other.new_page()
        login(p2, gw, f"/ui/memory?u=bob&m={mid}")
        foreign = p2.get_attribute("input[name=csrf_token]", "value")
        assert foreign != token
        r = page.request.post(gw.url + "/ui/forget", form={**form, "csrf_token": foreign})
        assert r.status == 403
        # Another site's form posting into the inspector (it cannot know a
        # token): the Strict cookie stays home, so the request is not logged
        # in, and it changes nothing.
        attack = (
            f'<form method="post" action="{gw.url}/ui/forget">'
            f'<input name="u" value="bob"><input name="m" value="{mid}"><button>go</button></form>'
        )
        html = "text/html"
        p2.route("http://attacker.test/", lambda r: r.fulfill(body=attack, content_type=html))
        p2.goto("http://attacker.test/")
        p2.click("button")
        p2.wait_for_load_state()
        assert "/ui/login" in p2.url
    finally:
        other.close()
    assert gw.store.get_memory("bob", mid)["status"] == "active"  # type: ignore[index]
    page.reload()
    assert page.locator("#forget").count() == 1


def test_one_users_data_never_on_anothers_page(page: Any, gw: Running) -> None:
    bobs = memory_id(gw, "bob", "cats")
    login(page, gw, f"/ui/memory?u=alice&m={bobs}")
    assert "cats" not in page.content()
    assert "has no memory" in page.inner_text("main")
    r = page.request.post(
        gw.url + "/ui/forget",
        form={"u": "alice", "m": bobs, "csrf_token": page.get_attribute(
            "input[name=csrf_token]", "value") or ""},
    )  # fmt: skip
    assert r.status == 404
    assert gw.store.get_memory("bob", bobs)["status"] == "active"  # type: ignore[index]
    page.goto(gw.url + "/ui/session?u=alice&s=s1")
    assert "cats" not in page.content()
    page.goto(gw.url + "/ui/recall?u=alice&q=allergic+cats")
    assert "cats" not in page.inner_text("main").replace("allergic cats", "")


def test_generations_switch_after_confirmation(page: Any, gw: Running) -> None:
    new = gw.store.rederive("bob")
    login(page, gw, "/ui/generations?u=bob")
    active_cell = "table.generations tr.active td:first-child"
    assert page.inner_text(active_cell).split()[0] == str(new)
    # Each generation's live memories by type, to compare before switching.
    header = page.inner_text("table.generations thead")
    assert all(t in header for t in ("persona", "episodic", "instruction"))
    page.click("text=Activate…")
    assert "Switch" in page.inner_text("form.confirm")
    assert gw.store.list_generations("bob")[-1]["active"]  # nothing changed before "yes"
    page.click("form.confirm button")
    active = [g["generation"] for g in gw.store.list_generations("bob") if g["active"]]
    assert active == [0]
    assert page.inner_text(active_cell).split()[0] == "0"


def test_usable_at_phone_width(browser: Any, gw: Running) -> None:  # noqa: F811
    ctx = browser.new_context(viewport={"width": 375, "height": 740})
    try:
        pg = ctx.new_page()
        login(pg, gw, "/ui/user?u=alice")
        paths = ("/ui/user?u=alice", "/ui/recall?u=alice&q=peanuts", "/ui/session?u=alice&s=s1")
        for path in paths:
            pg.goto(gw.url + path)
            assert pg.evaluate("document.documentElement.scrollWidth") <= 375, path
    finally:
        ctx.close()


def test_read_only_offers_no_action(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "ro.db"
    seed(db)
    with running_gateway(db, SETTINGS, api_key=KEY, read_only=True) as ro:
        ctx = browser.new_context()
        try:
            pg = ctx.new_page()
            mid = memory_id(ro, "alice", "peanuts")
            login(pg, ro, f"/ui/memory?u=alice&m={mid}")
            assert "read-only" in pg.inner_text("header")
            assert pg.locator("#forget").count() == 0
            ro.store.rederive("alice")
            pg.goto(ro.url + "/ui/generations?u=alice&confirm=0")
            assert pg.locator("text=Activate…").count() == 0
            assert pg.locator("form.confirm").count() == 0
            # Only the logout form remains: its token does not open a change either.
            token = pg.get_attribute("input[name=csrf_token]", "value") or ""
            r = pg.request.post(
                ro.url + "/ui/forget", form={"u": "alice", "m": mid, "csrf_token": token}
            )
            assert r.status == 403 and "read-only" in r.text()
            assert ro.store.get_memory("alice", mid)["status"] == "active"  # type: ignore[index]
        finally:
            ctx.close()


def test_works_without_javascript(browser: Any, gw: Running) -> None:  # noqa: F811
    ctx = browser.new_context(java_script_enabled=False)
    ctx.set_default_timeout(10_000)
    try:
        pg = ctx.new_page()
        login(pg, gw, "/ui/recall?u=alice")
        pg.fill("input[name=q]", "what is the user allergic to?")
        pg.click("form.filters button")
        assert "allergic to peanuts" in pg.inner_text("pre.per-turn")
        pg.click("table.candidates a:has-text('allergic to peanuts')")
        assert "Provenance" in pg.inner_text("main")
    finally:
        ctx.close()
