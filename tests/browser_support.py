"""A real headless Chromium for the inspector's tests: the distribution's
(``apt-get install chromium``), driven by Playwright for Python.

Without a Chromium the browser tests skip, unless MEMSTORE_TEST_REQUIRE_BROWSER
is set (CI sets it, so a missing browser fails there instead)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
# Read at import: each test runs with the MEMSTORE_* variables cleared.
GIVEN = os.environ.get("MEMSTORE_CHROMIUM")
REQUIRED = bool(os.environ.get("MEMSTORE_TEST_REQUIRE_BROWSER"))


def chromium_path() -> str | None:
    if GIVEN:
        return GIVEN
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        if REQUIRED:
            pytest.fail("no Chromium found (apt-get install chromium, or set MEMSTORE_CHROMIUM)")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        b = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
