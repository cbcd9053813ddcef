"""The executor's placer keeps each fenced tenant's promise for its life, as the simulator's does
(core/facts.py): each tenant by the fence it runs under, its own mode (its ``executor_config``'s
``isolation``, else the host's) with the host's cap rule (``TaskRequest.kept_margin_mib``, from
executor/starter.py ``TryStarter.kept_margin_mib``).  A newcomer is never offered the rest of a
co-tenant's promise that the co-tenant's fence lets it grow into, and is offered what an
unfenced co-tenant does not hold.

The executor counts a tenant seen past its lock window at its reservation (it has no per-process
reading), so what tells a kept promise from the paper's count here is the margin a cap fixed at the
try's start carries (``isolation_cap = promise``, ``isolation_margin_mib``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from executor_helpers import make_workload, release, submit

from carma_airflow.core import Outcome
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor import CarmaExecutor
from carma_airflow.executor.shared_ledger import SharedLedger
from carma_airflow.keys import request_key
from carma_airflow.store.peers import ReservationRecord

# a cap fixed at the try's start: its promise is its reservation + 2,048 MiB, for its life
FIXED = {"isolation_cap": "promise", "isolation_margin_mib": "2048"}
HOLD = {"seconds": 60.0, "until": "done"}  # runs until the test ends it


def _newcomer_outcome(ex: CarmaExecutor, mib: int) -> Outcome:
    """Where the executor's placer puts a newcomer an hour from now, its co-tenant long past its
    lock window (seen), on the GPUs the monitor shows now."""
    flow = ex.flow
    assert flow is not None and ex.monitor is not None
    gpus = flow.sight.gpus(time.time(), ex.monitor.latest())
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
