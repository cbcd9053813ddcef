"""Alembic environment of the store.

``Store.migrate()`` passes an open connection (inside a transaction) in
``config.attributes["connection"]``.  From the alembic command line (developers generating a
revision), give the database with ``-x url=...`` or ``sqlalchemy.url``.  Only ``carma_``
tables are looked at and versions live in ``carma_alembic_version``, so a database shared
with Airflow is safe.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from carma_airflow.store.schema import VERSION_TABLE, include_name, metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(
        url=url,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("give the store's database: alembic -x url=sqlite:///path/carma.db ...")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    _run_offline()
else:
    _run_online()
