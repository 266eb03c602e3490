"""Download BEAM or LoCoMo-Plus from their public GitHub repositories.

The files come from ``raw.githubusercontent.com`` at a pinned commit, so a
download today and one next year read the same bytes; each file is checked to
be JSON and written atomically under the target directory in the layout
``memstore bench locomo`` reads:

- ``beam``: ``<to>/100K/<n>/chat.json`` and
  ``<to>/100K/<n>/probing_questions/probing_questions.json`` for chats 1-20;
- ``locomo-plus``: ``<to>/locomo_plus.json`` (and, with ``hosts``, the
  ``locomo10.json`` of LoCoMo the dataset ships next to it).

Neither data set is part of memstore; see docs/benchmarks-data.md for their
licences.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from memstore.errors import InvalidInputError, MemstoreError

__all__ = ["SOURCES", "FetchError", "Source", "fetch_dataset", "planned_files"]

RAW_BASE = "https://raw.githubusercontent.com"
BEAM_CHATS = 20  # the 100K size (the paper's "128K"): chats 1-20


class FetchError(MemstoreError):
    """A download failed or did not return the expected JSON."""


@dataclass(frozen=True)
class Source:
    repo: str  # owner/name on GitHub
    commit: str  # pinned, so the bytes do not change under the bench
    licence: str  # what the repository says, for the command's output


SOURCES: dict[str, Source] = {
    "beam": Source(
        "mohammadtavakoli78/BEAM",
        "b2a3ee8ba12d68f83143dda191097dc3e028ddd3",
        "no licence file in the repository; the paper's data, cite it (arXiv 2510.27246)",
    ),
    "locomo-plus": Source(
        "xjtuleeyf/Locomo-Plus",
        "059f4e3d38f7f1f96765e8e2cb7de3097551bffb",
        "no licence file in the repository; locomo10.json is LoCoMo, CC BY-NC 4.0",
    ),
}


def planned_files(
    dataset: str, chats: Sequence[int] = (), hosts: bool = False
) -> list[tuple[str, Path]]:
    """``(path in the repository, path under the target directory)`` pairs."""
    if dataset == "beam":
        picked = list(chats) or list(range(1, BEAM_CHATS + 1))
        bad = [n for n in picked if not 1 <= n <= BEAM_CHATS]
        if bad:
            raise InvalidInputError(f"BEAM 100K chats are numbered 1-{BEAM_CHATS}, got {bad}")
        out = []
        for n in picked:
            for name in ("chat.json", "probing_questions/probing_questions.json"):
                out.append((f"chats/100K/{n}/{name}", Path("100K", str(n), name)))
        return out
    if dataset == "locomo-plus":
        out = [("data/locomo_plus.json", Path("locomo_plus.json"))]
        if hosts:
            out.append(("data/locomo10.json", Path("locomo10.json")))
        return out
    raise InvalidInputError(f"dataset must be one of {', '.join(SOURCES)}, got {dataset!r}")


def _write_atomically(target: Path, body: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    tmp.write_bytes(body)
    os.replace(tmp, target)


def fetch_dataset(
    dataset: str,
    to: Path,
    *,
    chats: Sequence[int] = (),
    hosts: bool = False,
    base_url: str = RAW_BASE,
    timeout_s: float = 60.0,
    log: Callable[[str], None] = lambda _: None,
) -> list[Path]:
    """Download ``dataset`` into ``to``; returns the files written.

    ``base_url`` stands for ``https://raw.githubusercontent.com`` (a mirror
    serving the same ``/<owner>/<repo>/<commit>/<path>`` layout)."""
    files = planned_files(dataset, chats, hosts)
    src = SOURCES[dataset]
    written: list[Path] = []
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        for repo_path, rel in files:
            url = f"{base_url.rstrip('/')}/{src.repo}/{src.commit}/{repo_path}"
            try:
                resp = client.get(url)
            except httpx.HTTPError as exc:
                raise FetchError(f"cannot download {url}: {exc}") from exc
            if resp.status_code != 200:
                raise FetchError(f"cannot download {url}: HTTP {resp.status_code}")
            try:
                json.loads(resp.content)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                # An LFS pointer or an error page is not the data: keep nothing.
                raise FetchError(f"{url} did not return JSON: {exc}") from exc
            target = to / rel
            _write_atomically(target, resp.content)
            written.append(target)
            log(f"{target} ({len(resp.content):,} bytes)")
    return written
