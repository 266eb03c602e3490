"""Alembic environment for memstore.

Used two ways: by ``memstore.db.migrate`` (which hands us a connection of the
store's engine, so sqlite-vec is loaded and the upgrade runs inside its
``BEGIN IMMEDIATE``), and by developers running ``alembic`` at the repository
root (then we build an engine the same way from ``sqlalchemy.url``).
"""

from __future__ import annotations

from typing import Any

from alembic import context

from memstore.db.schema import include_name, metadata

config = context.config


def _configure(connection: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        include_name=include_name,
        compare_type=True,
        compare_server_default=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from memstore.db.engine import SqliteDatabase

    url = config.get_main_option("sqlalchemy.url") or ""
    path = url.removeprefix("sqlite:///") or "memstore.db"
    db = SqliteDatabase(path)
    try:
        with db.write() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        db.close()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
