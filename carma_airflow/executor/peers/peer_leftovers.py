"""What gone CarmaExecutors left on the store, seen by a live one (several schedulers, peers.py):
the tries that still run and count as tenants, reservations whose try is over, and the end of a
try whose process ended while no executor watched it.  Only owners the view says are *gone*
(not unknown) are touched."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.fencing import PAST_CAP
from carma_airflow.executor.peers.peer_view import pid_exists
from carma_airflow.executor.tries import stopped_at_cap
from carma_airflow.store.peers import ReservationRecord
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.taskrun.outcome import read_result

if TYPE_CHECKING:
    from carma_airflow.executor.peers.peers import Peers

log = logging.getLogger("carma_airflow.executor")


def count_gone_placements(peers: Peers) -> bool:
    """Exclusive mode, after the executor that placed is gone: its tries that still run (it
    published nothing) count as tenants until they are adopted or end; read while any does.
    False if the store could not be read."""
    try:
        rows = peers.store.running()
    except CarmaError as exc:
        log.warning("carma store unreachable: the gone executor's tries are not counted (%s)", exc)
        return False
    held = [
        ReservationRecord(r.key, r.owner or "", r.label, r.gpu_uuids, r.estimate_mib or 0, r.decided_at.timestamp())
        for r in rows
        if r.outcome is TryOutcome.RUNNING
        and r.owner not in (None, peers.me)
        and r.gpu_uuids
        and peers.owner_gone(r.owner, r.decided_at.timestamp())
        and (r.host not in (peers.host, None) or r.pid is None or pid_exists(r.pid))
    ]
    ledger = peers.ledger
    ledger.lay_over([r for r in held if r.key not in ledger or r.key in ledger.foreign])
    return True


def reap(peers: Peers, now: float) -> None:
    """Reservations of gone executors whose try is over (its process on this host has ended,
    it never started, or its end is recorded) stop counting: the peers' passes drop them."""
    store = peers.store
    try:
        others = [r for r in store.shared_reservations() if r.owner != peers.me]
        over = []
        for res in others:
            if not peers.owner_gone(res.owner, res.since):
                continue
            rec = store.placement(res.key)
            if rec is None or rec.outcome.finished:
                over.append(res.key)
            elif rec.pid is None:
                if now - res.since > 4 * peers.timeout_s:  # placed, never launched: its owner died between
                    over.append(res.key)
            elif rec.host in (peers.host, None) and not pid_exists(rec.pid):
                over.append(res.key)
                conclude(peers, rec, now)
        if over:
            store.drop_reservations(over)
            log.info("Reservations of gone CarmaExecutors released (their tries ended): %s", ", ".join(over))
    except CarmaError as exc:
        log.debug("carma store unreachable while reaping gone executors' reservations: %s", exc)


def conclude(peers: Peers, rec: PlacementRecord, now: float) -> None:
    """A gone executor's try whose process ended before any executor adopted it: its end,
    from its result file, in the store (Airflow has the try's outcome from the task itself)."""
    result = read_result(Path(peers.state_dir) / "results" / f"{rec.ti_id}.json") if rec.ti_id else None
    if result is None:
        outcome, summary = TryOutcome.FAILED, "ended while its executor was gone; no result file"
    elif result.past_cap:  # its own cap stopped it (core/fencing.py), as the executor's summary says
        outcome = TryOutcome.OOM
        summary = f"CUDA OOM {PAST_CAP}: {stopped_at_cap(result)} (ended while its executor was gone)"
    elif result.is_oom:
        outcome, summary = TryOutcome.OOM, "CUDA out of memory (ended while its executor was gone)"
    else:
        outcome = TryOutcome.SUCCESS if result.succeeded else TryOutcome.FAILED
        summary = f"{outcome.value} (ended while its executor was gone)"
    peak = result.peak_mib if result is not None else None
    peers.store.mark_ended(rec.key, now, outcome, peak, summary)


__all__ = ["conclude", "count_gone_placements", "reap"]
