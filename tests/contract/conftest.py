"""One contract, two backends: every test here runs on a SQLite file and on
PostgreSQL (the fixtures ``backend``, ``target``, ``new_target`` and
``store`` come from tests/backends.py, which says how)."""
