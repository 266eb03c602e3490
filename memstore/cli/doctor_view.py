"""How ``doctor`` shows its report, and its check of the vector spaces."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any


def scratch_db() -> Path:
    """A throwaway database file for checking SQLite when the real one is absent."""
    folder = Path(tempfile.mkdtemp(prefix="memstore-doctor-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder / "check.db"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_value(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(_value(x) for x in v) or "-"
    return str(v)


def lines(report: dict[str, Any]) -> list[str]:
    """One readable line per item; a nested mapping gets one line per key."""
    out: list[str] = []
    width = max((len(k) for k in report), default=0)
    for key, value in report.items():
        label = key.replace("_", " ")
        if isinstance(value, dict) and any(isinstance(x, dict) for x in value.values()):
            out.append(f"{label:>{width}}:")
            for sub, x in value.items():
                out.append(f"{'':>{width}}  {str(sub).replace('_', ' ')}: {_value(x)}")
        else:
            out.append(f"{label:>{width}}: {_value(value)}")
    return out


def check_spaces(db: Path | str, report: dict[str, Any], problems: list[str]) -> None:
    """Vectors built by another model than the configured one leave search
    keyword-only until a reindex: say so, with the command. Runs after the
    hooks (the embedder hook fills ``report["embeddings"]``)."""
    status = report.get("embeddings")
    if not isinstance(status, dict) or report.get("schema_revision") is None:
        return
    from memstore.db.connect import open_database
    from memstore.vectors.spaces import list_spaces

    database = open_database(db)
    try:
        with database.read() as conn:
            others = {(s.kind, s.model_id) for s in list_spaces(conn) if s.ready}
    finally:
        database.close()
    for kind in ("l0", "l1"):
        mine = status.get(kind)
        if not isinstance(mine, dict) or mine.get("ready") or not mine.get("pending"):
            continue
        old = sorted(m for k, m in others if k == kind)
        if old:
            problems.append(
                f"{kind} vectors were built with {', '.join(old)}, not the configured "
                f"embedder {status.get('model_id')}: vector search is keyword-only until "
                "`memstore reindex` finishes"
            )


__all__ = ["check_spaces", "lines", "scratch_db"]
