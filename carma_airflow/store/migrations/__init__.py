"""Alembic migrations of the store (run through ``Store.migrate()``)."""
