"""Frozen copies of the helpers the migrations use, as each migration ran
when it was written: DDL of the full-text tables (``ddl``), tokenising and
word roots (``cjk``, ``stem``, ``fts``, ``terms``), content-free messages
(``info``) and the packing of capture events (``packing``).

A migration must do the same thing forever, whatever later versions of
memstore change in their own text handling or event encoding, so migrations
import these and never ``memstore.text``, ``memstore.events`` or other live
code. These files are never edited: a new migration that needs different
behaviour adds a new module beside them (tests/test_migrations_frozen.py
pins their contents).
"""
