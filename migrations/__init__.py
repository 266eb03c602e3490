"""Alembic migrations; installed as ``memstore._migrations`` (see pyproject.toml)."""
