"""The executor's placer keeps each fenced tenant's promise for its life, as the simulator's does
(core/facts.py): each tenant by the fence it runs under, its own mode (its ``executor_config``'s
``isolation``, else the host's) with the host's cap rule (``TaskRequest.kept_margin_mib``, from
executor/starting/starter.py ``TryStarter.kept_margin_mib``).  A newcomer is never offered the rest of a
co-tenant's promise that the co-tenant's fence lets it grow into, and is offered what an
unfenced co-tenant does not hold.

The executor counts a tenant seen past its lock window at its reservation (it has no per-process
reading), so what tells a kept promise from the paper's count here is the margin a cap fixed at the
try's start carries (``isolation_cap = promise``, ``isolation_margin_mib``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from executor_helpers import make_workload, release, submit

from carma_airflow.core import Outcome
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor import CarmaExecutor
from carma_airflow.executor.peers import SharedLedger, record_of
from carma_airflow.keys import request_key
from carma_airflow.store.peers import ReservationRecord
from carma_airflow.store.records import fence_of

# a cap fixed at the try's start: its promise is its reservation + 2,048 MiB, for its life
FIXED = {"isolation_cap": "promise", "isolation_margin_mib": "2048"}
HOLD = {"seconds": 60.0, "until": "done"}  # runs until the test ends it


def _newcomer_outcome(ex: CarmaExecutor, mib: int) -> Outcome:
    """Where the executor's placer puts a newcomer an hour from now, its co-tenant long past its
    lock window (seen), on the GPUs the monitor shows now."""
    flow = ex.flow
    assert flow is not None and ex.monitor is not None
    gpus = flow.sight.gpus(time.time(), ex.monitor.reading())
    view = flow.cycle.reservations.view(time.time() + 3600.0, gpus)
    newcomer = TaskRequest(key="newcomer", label="newcomer", memory=MemoryNeed(mib, "declared"))
    return flow.placer.decide(newcomer, view).outcome


def _place_tenant(ex: CarmaExecutor, config: dict[str, object]) -> str:
    """A 24,000 MiB try, placed and running; its request key."""
    w = make_workload("tenant", config={"memory": "24000MiB", **config})
    submit(ex, w)
    assert w.key in ex.active
    return request_key(w.key)


def test_a_try_asking_a_fence_on_an_unfenced_host_is_kept_its_promise_for_life(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    # isolation = none; the try asks framework: capped at 24,000 + 2,048, so it may grow to 26,048.
    # Counted at that: 40,960 - 26,048 - 512 = 14,400 usable, less than 13,000 + 2,048: the newcomer
    # waits (the paper's count, 24,000, would leave 16,448 and place it in the tenant's promise)
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"tenant": HOLD}, isolation="none", **FIXED)
    key = _place_tenant(ex, {"isolation": "framework"})
    assert ex.flow is not None
    held = ex.flow.cycle.reservations.get(key)
    assert held is not None and held.kept_margin_mib == 2048
    assert _newcomer_outcome(ex, 13000) is Outcome.NOT_NOW
    assert _newcomer_outcome(ex, 12000) is Outcome.PLACED  # what nobody was promised is still offered
    release("done")


def test_a_try_asking_none_on_a_fenced_host_is_counted_as_the_paper_counts(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    # isolation = framework (fixed caps); the try asks none: nothing lets it grow into a margin, so
    # it counts at its 24,000 once seen, 16,448 usable: the newcomer of 13,000 + 2,048 fits
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"tenant": HOLD}, isolation="framework", **FIXED)
    key = _place_tenant(ex, {"isolation": "none"})
    assert ex.flow is not None
    held = ex.flow.cycle.reservations.get(key)
    assert held is not None and held.kept_margin_mib is None
    assert _newcomer_outcome(ex, 13000) is Outcome.PLACED
    release("done")


def test_a_try_of_the_hosts_own_mode_is_kept_the_hosts_promise(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"tenant": HOLD}, isolation="framework", **FIXED)
    _place_tenant(ex, {})
    assert _newcomer_outcome(ex, 13000) is Outcome.NOT_NOW  # 24,000 + 2,048 kept
    release("done")


def test_a_peers_tenant_is_kept_the_promise_of_this_hosts_fence() -> None:
    """A peer does not publish its try's fence: its tenant counts by this host's configured one."""
    ledger = SharedLedger(seen_after_s=0.5, foreign_kept_margin_mib=2048)
    ledger.lay_over([ReservationRecord("peer-try", "peer", "peer.task", ("GPU-0",), 24000, 0.0)])
    (tenant,) = ledger.tenants_on("GPU-0", 3600.0)
    assert (tenant.key, tenant.kept_margin_mib) == ("peer-try", 2048)


def test_a_peers_published_fence_is_the_one_its_tenant_is_kept() -> None:
    """A peer that publishes its try's fence (store revision 0008): that fence, not this host's,
    whether the peer's try is fenced with another margin or not fenced at all; a changed fence
    is laid over again."""
    ledger = SharedLedger(seen_after_s=0.5, foreign_kept_margin_mib=2048)
    recs = [
        ReservationRecord("a", "peer", "peer.a", ("GPU-0",), 8000, 0.0, fence=fence_of(0)),
        ReservationRecord("b", "peer", "peer.b", ("GPU-0",), 8000, 0.0, fence=fence_of(None)),
        ReservationRecord("c", "peer", "peer.c", ("GPU-0",), 8000, 0.0, fence=fence_of(4096)),
    ]
    ledger.lay_over(recs)
    assert {t.key: t.kept_margin_mib for t in ledger.tenants_on("GPU-0", 3600.0)} == {"a": 0, "b": None, "c": 4096}
    ledger.lay_over([replace(recs[0], fence=fence_of(1024)), *recs[1:]])
    assert {t.key: t.kept_margin_mib for t in ledger.tenants_on("GPU-0", 3600.0)}["a"] == 1024
    (mine,) = [record_of(r, "me") for r in ledger if r.key == "c"]
    assert mine.fence == {"kept_margin_mib": 4096}  # published as it is held


def test_a_try_found_running_at_a_restart_is_kept_the_fence_it_started_with() -> None:
    """A restarted executor holds a try it finds running with the margin stored with its placement
    (revision 0008), whatever its own host's fence is now; a record from before: the host's."""
    from datetime import datetime, timezone

    from carma_airflow.executor.flow.restart import request_of
    from carma_airflow.store import PlacementRecord

    rec = PlacementRecord("d/t/r/-1/1", "d", "t", "r", 1, datetime(2026, 12, 2, tzinfo=timezone.utc))
    assert request_of(replace(rec, fence=fence_of(0)), 2048).kept_margin_mib == 0
    assert request_of(replace(rec, fence=fence_of(None)), 2048).kept_margin_mib is None  # started unfenced
    assert request_of(rec, 2048).kept_margin_mib == 2048  # not stored: the host's configured fence
