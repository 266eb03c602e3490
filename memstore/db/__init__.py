"""Database access: a SQLite file or PostgreSQL (preview); transactions, schema, migrations."""

from memstore.db.driver import sqlite_module
from memstore.db.engine import Database, SqliteDatabase

__all__ = ["Database", "SqliteDatabase", "sqlite_module"]
