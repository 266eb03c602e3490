"""SQLite access: driver choice, engine with pragmas, transactions, schema, migrations."""

from memstore.db.engine import Database
from memstore.db.driver import sqlite_module

__all__ = ["Database", "sqlite_module"]
