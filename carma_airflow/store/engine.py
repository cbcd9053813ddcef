"""The store's connection to its database: engine, transactions, errors and migrations.

:class:`StoreBase` holds what every part of :class:`~carma_airflow.store.store.Store` shares:
the URL, the engine, one transaction per call (:meth:`StoreBase._session`), the translation of
driver errors into a :class:`StoreError` of the right kind (:class:`StoreUnreachableError`: try again
later; :class:`StoreRefusedError`: this call can never succeed) with a hint, and the schema migrations.  The parts
(samples, tries, history, snapshots, hosts) add their tables' calls on top of it.

SQLite (the default, a file in AIRFLOW_HOME) runs in WAL mode with a busy timeout, and every
write takes the write lock when its transaction begins (``BEGIN IMMEDIATE``), so the executor,
task runners and the CLI can use one file at once.  PostgreSQL is the choice for many hosts.
"""

from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import CursorResult, Engine, Insert, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import Executable

from carma_airflow.store.errors import RecordError, StoreError, StoreRefusedError, StoreUnreachableError
from carma_airflow.store.schema import VERSION_TABLE, Base
from carma_airflow.store.url import default_url, mask_password

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
_WRITE = "carma_write"  # connection execution option: this transaction will write
_MIGRATE_LOCK = 0x6361726D61  # pg_advisory_xact_lock key ("carma") serialising migrations

_S = TypeVar("_S", bound="StoreBase")

Moment = datetime | float
"""A point in time: a datetime (naive means UTC) or seconds since the epoch (``time.time()``)."""


def utc(at: datetime | float) -> datetime:
    """``at`` as a timezone-aware UTC datetime (naive datetimes are taken as UTC)."""
    if isinstance(at, datetime):
        return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise RecordError(f"a time must be a datetime or seconds since the epoch, got {at!r}")
    return datetime.fromtimestamp(at, tz=timezone.utc)


def check_limit(limit: int) -> None:
    if limit < 1:
        raise RecordError(f"limit must be at least 1, got {limit}")


class StoreBase:
    """The bookkeeping store at one database URL (SQLite or PostgreSQL).

    Nothing connects until the first call.  Call :meth:`migrate` once (it is cheap when the
    schema is current) before using a new database.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0) -> None:
        try:
            self._url: URL = make_url(url)
        except sa_exc.ArgumentError:
            raise StoreError(
                f"cannot read the store URL {mask_password(url)!r}; write it as sqlite:////abs/path/carma.db "
                "or postgresql+psycopg://user:password@host:5432/dbname"
            ) from None
        self._masked = self._url.render_as_string(hide_password=True)
        backend = self._url.get_backend_name()
        if backend not in SUPPORTED_BACKENDS:
            raise StoreError(
                f"the store supports SQLite and PostgreSQL, not {backend!r} ({self._masked}); "
                "use sqlite:///... or postgresql+psycopg://..."
            )
        self._sqlite = backend == "sqlite"
        self.busy_timeout_s = busy_timeout_s
        connect_args: dict[str, Any] = {"timeout": busy_timeout_s} if self._sqlite else {}
        try:
            self._engine: Engine = create_engine(self._url, pool_pre_ping=True, connect_args=connect_args)
        except (sa_exc.ArgumentError, ImportError) as exc:
            raise StoreError(
                f"cannot open the store at {self._masked}: {exc}; check the driver in the URL "
                "(sqlite:// or postgresql+psycopg://) and that its package is installed"
            ) from None
        _forget_connections_across_fork(self._engine)
        if self._sqlite:
            _configure_sqlite(self._engine, busy_timeout_s)

    # -- housekeeping -------------------------------------------------------------------

    @property
    def masked_url(self) -> str:
        """The database URL with any password replaced by ``***`` (safe for logs and errors)."""
        return self._masked

    @staticmethod
    def default_url(airflow_home: str) -> str:
        """``sqlite:///{airflow_home}/carma.db``."""
        return default_url(airflow_home)

    def __repr__(self) -> str:
        return f"Store({self._masked!r})"

    def close(self) -> None:
        """Close pooled connections (the store opens new ones if used again)."""
        self._engine.dispose()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- migrations ---------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to ``revision`` (default the newest: ``alembic upgrade head``); a no-op when current.

        Safe to call from several processes at once: migrations run one at a time.
        """
        from alembic import command

        config = self._alembic_config()
        with self._connect(write=True) as conn, conn.begin():
            if not self._sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATE_LOCK})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)

    def revision(self) -> str | None:
        """The schema revision of the database, None before the first :meth:`migrate`."""
        from alembic.runtime.migration import MigrationContext

        with self._connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()

    def head_revision(self) -> str:
        """The newest revision this version of carma-airflow ships."""
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config()).get_current_head()
        assert head is not None
        return head

    def _alembic_config(self) -> Config:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.set_main_option("path_separator", "os")
        return config

    # -- plumbing for the parts ---------------------------------------------------------

    def _upsert(self, table: type[Base], key: str, values: dict[str, Any]) -> Insert:
        """Insert ``values``, or on a clash of column ``key`` replace the other columns in ``values``
        (columns not in ``values`` keep what is stored)."""
        dialect_insert = sqlite_insert if self._sqlite else pg_insert
        stmt = dialect_insert(table).values(values)
        return stmt.on_conflict_do_update(
            index_elements=[key], set_={name: stmt.excluded[name] for name in values if name != key}
        )

    def _write(self, stmt: Executable) -> int:
        """Run one writing statement in a transaction of its own; returns the rows it matched."""
        with self._session(write=True) as session:
            result = session.execute(stmt, execution_options={"synchronize_session": False})
            return cast(CursorResult[Any], result).rowcount

    def _update(self, stmt: Executable) -> bool:
        return self._write(stmt) > 0

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                if write:
                    conn.execution_options(**{_WRITE: True})
                yield conn
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise self._error(exc) from exc

    @contextmanager
    def _session(self, write: bool = False) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back on an error."""
        try:
            with Session(self._engine, expire_on_commit=False) as session, session.begin():
                if write:
                    session.connection(execution_options={_WRITE: True})
                yield session
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sa_exc.SQLAlchemyError) -> StoreUnreachableError | StoreRefusedError:
        orig = getattr(exc, "orig", None)
        detail = " ".join(str(orig if orig is not None else exc).split())
        if self._url.password:
            detail = detail.replace(str(self._url.password), "***")
        lowered = detail.lower()
        if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
            hint = "the store's tables are missing: run Store(url).migrate() once for this database"
        elif self._sqlite and "locked" in lowered:
            hint = (
                f"another process held the SQLite file longer than the busy timeout ({self.busy_timeout_s:g} s); "
                "raise the timeout or use PostgreSQL for many writers"
            )
        elif self._sqlite and "unable to open" in lowered:
            hint = "check that the file's directory exists and that this user may write to it"
        elif str(getattr(orig, "sqlstate", "")) in ("55P03", "40001", "40P01", "57014"):
            hint = (
                "another session held a lock, or the database rolled this transaction back to keep "
                "concurrent ones consistent; the same call made again should pass"
            )
        elif isinstance(exc, sa_exc.IntegrityError):
            hint = "a record broke a constraint of the store: check the values the caller passed"
        elif isinstance(exc, (sa_exc.OperationalError, sa_exc.TimeoutError)):
            hint = (
                "check that the database server is running and reachable from this host, that the database "
                "exists, and the user name and password in the store URL"
            )
        else:
            hint = "check that the schema is current (Store(url).migrate())"
        kind = StoreRefusedError if is_permanent(exc) else StoreUnreachableError
        return kind(f"CARMA store at {self._masked} failed: {detail} ({hint})")


# PostgreSQL SQLSTATE classes of errors that the same statement meets again however often it is
# retried: data exceptions (22), integrity constraints (23), syntax or access rule violations,
# missing tables and columns included (42), features not supported (0A), WITH CHECK OPTION (44).
_PERMANENT_SQLSTATE_CLASSES = frozenset({"22", "23", "42", "0A", "44"})
_PERMANENT_TYPES: tuple[type[sa_exc.DBAPIError], ...] = (
    sa_exc.IntegrityError,
    sa_exc.DataError,
    sa_exc.ProgrammingError,
    sa_exc.NotSupportedError,
)
_SQLITE_SCHEMA = ("no such table", "no such column", "has no column named")


def is_permanent(exc: BaseException) -> bool:
    """Whether a driver error is a refusal (retrying cannot help) rather than a transient failure.

    Transient: the connection was lost or refused, a lock or the pool timed out, the database
    rolled the transaction back (serialisation failure 40001, deadlock 40P01), the server is
    shutting down or out of connections.  Permanent: a constraint broke, a value does not fit,
    the schema lacks a table or column.  An error SQLAlchemy itself invalidated the connection
    for is always transient.
    """
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return False
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        return sqlstate[:2] in _PERMANENT_SQLSTATE_CLASSES
    if isinstance(exc, _PERMANENT_TYPES):
        return True
    if isinstance(orig, sqlite3.OperationalError):
        return any(text_ in str(orig).lower() for text_ in _SQLITE_SCHEMA)
    return False


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    """WAL, a busy timeout, and transactions SQLAlchemy begins itself (IMMEDIATE for writes)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            _enable_wal(cursor, busy_timeout_s)
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A deferred transaction that reads and then writes cannot wait for the lock in WAL
        # mode (SQLITE_BUSY at once); taking it up front lets the busy timeout apply.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def _enable_wal(cursor: sqlite3.Cursor, busy_timeout_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried for up to the busy timeout while the file is locked.

    Switching a file that is still in rollback-journal mode (a new one) needs an exclusive lock,
    and SQLite answers "database is locked" at once, without waiting out the busy timeout, when
    another connection holds the write lock (two processes that open a new store together: one
    migrates while the other connects).  Once the file is in WAL mode (it stays so) the pragma
    takes no lock worth waiting for.
    """
    deadline = time.monotonic() + busy_timeout_s
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


def _forget_connections_across_fork(engine: Engine) -> None:
    """A forked child drops (without closing) the pooled connections it inherited.

    Closing or pinging them would talk on the parent's sockets; ``dispose(close=False)`` is
    SQLAlchemy's recipe for pools and ``fork()``.  The engine is held weakly.
    """
    ref = weakref.ref(engine)

    def _after_fork_in_child() -> None:
        inherited = ref()
        if inherited is not None:
            inherited.dispose(close=False)

    os.register_at_fork(after_in_child=_after_fork_in_child)
