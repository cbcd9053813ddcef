"""Which executors' live snapshots are current: one per running CarmaExecutor, merged by readers.

Each CarmaExecutor writes its live view (executor/bookkeeping/snapshot.py) as ``executor:<executor id>``, the
id it beats under in ``carma_executor`` (``host:pid:random``), and names that id in the body
(``"executor"``).  Two executors on one host (two schedulers on one machine) so write two
documents, not one they overwrite in turn: the page used to show one of them, then the other.

Readers (the GPU page, ``carma gpus``) take :func:`current`: the snapshot of every executor that
beats (or, with no row yet, whose snapshot is fresh: registration may have failed, and unknown is
not gone), and for a host where none does, the host's newest snapshot, so the page still shows
that host's GPUs (stale) after its executor stopped.  A snapshot of a gone executor beside a live
one on the same host is dropped; its document is deleted with the executor's row an hour later
(``Store.forget_executors``).

A snapshot written before this scheme, ``executor:<host>`` with no ``"executor"`` in its body,
is read like a gone executor's: its host's view while no current executor there writes one,
ignored once one does (it is never deleted: an older executor may still be writing it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from carma_airflow.core.errors import ConfigError

PREFIX = "executor:"

Snapshots = Mapping[str, tuple[datetime, dict[str, Any]]]


class Beating(Protocol):
    """What :func:`current` reads of an executor's row (``store.peers.ExecutorRecord``): the store
    imports this module to name the documents it deletes, so this one does not import the store."""

    @property
    def id(self) -> str: ...

    def alive(self, now: float, timeout_s: float) -> bool: ...


def name_of(executor_id: str) -> str:
    """The snapshot name executor ``executor_id`` writes."""
    if not executor_id:
        raise ConfigError("a live snapshot needs the executor's id")
    return f"{PREFIX}{executor_id}"


def executor_of(body: Mapping[str, Any]) -> str | None:
    """The executor id a snapshot names; None: written before ids were recorded."""
    value = body.get("executor")
    return value if isinstance(value, str) and value else None


def host_of(name: str, body: Mapping[str, Any]) -> str:
    host = body.get("host")
    return host if isinstance(host, str) and host else name.removeprefix(PREFIX).split(":", 1)[0]


def written_at(at: datetime, body: Mapping[str, Any]) -> float:
    """When the executor wrote it (its own clock, the body's ``at``), else when the store got it."""
    value = body.get("at")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return at.timestamp()


def current(
    snapshots: Snapshots, executors: Iterable[Beating], now: float, timeout_s: float
) -> dict[str, tuple[datetime, dict[str, Any]]]:
    """The snapshots a reader should show, by name (see the module docstring)."""
    rows = {e.id: e for e in executors}
    kept: dict[str, tuple[datetime, dict[str, Any]]] = {}
    newest: dict[str, tuple[float, str]] = {}  # host -> its newest snapshot not kept as live
    for name, (at, body) in snapshots.items():
        when = written_at(at, body)
        eid = executor_of(body)
        rec = rows.get(eid) if eid is not None else None
        live = rec.alive(now, timeout_s) if rec is not None else eid is not None and now - when <= timeout_s
        if live:
            kept[name] = (at, body)
            continue
        host = host_of(name, body)
        if host not in newest or when > newest[host][0]:
            newest[host] = (when, name)
    live_hosts = {host_of(name, body) for name, (_, body) in kept.items()}
    for host, (_, name) in newest.items():
        if host not in live_hosts:
            kept[name] = snapshots[name]
    return dict(sorted(kept.items()))


__all__ = ["PREFIX", "Beating", "Snapshots", "current", "executor_of", "host_of", "name_of", "written_at"]
