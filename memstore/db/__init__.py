"""Database access: a SQLite file or PostgreSQL (preview); transactions, schema, migrations."""

from memstore.db.driver import sqlite_module
from memstore.db.engine import Database

__all__ = ["Database", "sqlite_module"]
