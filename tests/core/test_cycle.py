"""The scheduling cycle: the waiting set, the pass, reservations across passes, recovery."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from helpers import CALM, idle_gpu, request

from carma_airflow.core import (
    Backfill,
    DuplicateKeyError,
    Failure,
    FailureKind,
    Fifo,
    GiveUp,
    GpuState,
    Outcome,
    Placer,
    Reason,
    RecoverySettings,
    RetryMode,
    RetryPlan,
    SchedulingCycle,
)
from carma_airflow.core.policies import make_policy
from carma_airflow.core.queueing import QueuePlan, Rank
from carma_airflow.core.task import TaskRequest

OOM = Failure(FailureKind.CUDA_OOM, "CUDA out of memory")


def gpus(n: int = 2) -> list[GpuState]:
    """What the monitor reads: idle GPUs, whatever the cycle placed on them (readings lag)."""
    return [idle_gpu(i, window=CALM) for i in range(n)]


def cycle(policy: str = "interference-aware", **kwargs: object) -> SchedulingCycle:
    return SchedulingCycle(Placer(make_policy(policy)), Backfill(), **kwargs)  # type: ignore[arg-type]


def test_a_placed_try_is_reserved_and_the_next_pass_counts_it() -> None:
    c = cycle()
    c.submit(request("a#1", 30000), 0.0)
    first = c.run(1.0, gpus(1))
    (placed,) = first.placed
    assert placed.request.key == "a#1" and placed.decision.gpu_uuids == ("GPU-0",)
    assert placed.waited_s == 1.0 and placed.prior_ooms == 0
    assert len(c) == 0 and c.reservations.get("a#1") is not None

    # the monitor still reads GPU 0 as empty; the reservation keeps a second 30 GB try off it
    c.submit(request("b#1", 30000), 2.0)
    second = c.run(3.0, gpus(1))
    assert second.placed == ()
    waits = second.waiting["b#1"]
    assert waits.outcome is Outcome.NOT_NOW
    assert [v.reason for v in waits.rejected] == [Reason.MEMORY]
    assert [t.key for t in second.view.gpus[0].tenants] == ["a#1"]


def test_release_frees_the_gpus_for_the_next_pass() -> None:
    c = cycle()
    c.submit(request("a#1", 30000), 0.0)
    c.run(0.0, gpus(1))
    c.submit(request("b#1", 30000), 0.0)
    assert c.run(1.0, gpus(1)).placed == ()
    assert c.release("a#1") is not None
    (placed,) = c.run(2.0, gpus(1)).placed
    assert placed.request.key == "b#1" and placed.waited_s == 2.0
    assert c.release("a#1") is None


def test_one_pass_places_many_consistently_and_reserves_each() -> None:
    c = cycle()
    for k in range(4):
        c.submit(request(f"t{k}#1", 12000), 0.0)
    result = c.run(1.0, gpus(2))
    assert len(result.placed) == 4
    on = {u: [r.key for r in c.reservations.on(u)] for u in ("GPU-0", "GPU-1")}
    assert sorted(k for ks in on.values() for k in ks) == ["t0#1", "t1#1", "t2#1", "t3#1"]
    assert all(len(ks) == 2 for ks in on.values())  # 2 x 12 GB + headroom fit on 40 GB, 3 do not


def test_an_exclusive_try_keeps_its_gpu_to_itself_until_released() -> None:
    c = cycle()
    c.submit(request("x#1", 4000, exclusive=True), 0.0)
    c.run(0.0, gpus(1))
    c.submit(request("small#1", 1000), 0.0)
    blocked = c.run(1.0, gpus(1))
    assert blocked.placed == ()
    assert [v.reason for v in blocked.waiting["small#1"].rejected] == [Reason.EXCLUSIVE_TENANT]
    c.release("x#1")
    assert [p.request.key for p in c.run(2.0, gpus(1)).placed] == ["small#1"]


def test_the_lock_window_counts_a_fresh_tenants_activity_then_trusts_the_monitor() -> None:
    c = cycle()
    c.submit(request("a#1", 4000), 0.0)
    c.run(0.0, gpus(1))
    prior = c.placer.settings.activity_prior
    fresh = c.placer.facts(c.view(10.0, gpus(1)))[0]
    seen = c.placer.facts(c.view(c.placer.settings.lock_s, gpus(1)))[0]
    assert fresh.smact == pytest.approx(CALM.smact_score + prior)
    assert seen.smact == pytest.approx(CALM.smact_score)


def test_a_try_that_can_never_fit_leaves_the_waiting_set_with_its_reason() -> None:
    c = cycle()
    c.submit(request("huge#1", 100_000), 0.0)
    c.submit(request("two#1", 1000, gpus=3), 0.0)
    c.submit(request("ok#1", 1000), 0.0)
    result = c.run(1.0, gpus(2))
    assert [p.request.key for p in result.placed] == ["ok#1"]
    never = {n.request.key: n.decision for n in result.never_fits}
    assert set(never) == {"huge#1", "two#1"}
    assert all(d.outcome is Outcome.NEVER_FITS for d in never.values())
    assert "largest GPU offers" in never["huge#1"].summary
    assert "asks for 3 GPUs but the largest host has 2" in never["two#1"].summary
    assert len(c) == 0 and "huge#1" not in c.reservations and dict(result.waiting) == {}


def test_withdraw_takes_a_waiting_try_out() -> None:
    c = cycle()
    c.submit(request("a#1", 1000), 0.0)
    c.submit(request("b#1", 1000), 0.0)
    withdrawn = c.withdraw("a#1")
    assert withdrawn is not None and withdrawn.key == "a#1"
    assert c.withdraw("a#1") is None
    assert "a#1" not in c and "b#1" in c
    assert [p.request.key for p in c.run(1.0, gpus(1)).placed] == ["b#1"]
    assert c.withdraw("b#1") is None  # running now: release it instead


def test_a_try_is_handed_over_once() -> None:
    c = cycle()
    c.submit(request("a#1", 1000), 0.0)
    with pytest.raises(DuplicateKeyError, match="already waiting or running"):
        c.submit(request("a#1", 1000), 1.0)
    c.run(1.0, gpus(1))
    with pytest.raises(DuplicateKeyError):
        c.submit(request("a#1", 1000), 2.0)  # it runs
    c.submit(request("b#1", 1000), 2.0)
    with pytest.raises(DuplicateKeyError, match="is waiting"):
        c.hold(request("b#1", 1000), ["GPU-0"], 0.0)


def test_recovery_after_an_oom_releases_plans_more_memory_elsewhere_and_queues_it() -> None:
    c = cycle(recovery=RecoverySettings(max_oom_retries=2))
    c.submit(request("a#1", 8000), 0.0)
    (first,) = c.run(0.0, gpus(2)).placed
    crashed = first.decision.gpu_uuids

    plan = c.recover("a#1", OOM, now=10.0, peak_mib=12000)
    assert isinstance(plan, RetryPlan)
    nxt = plan.request
    assert "a#1" not in c.reservations and "a#2" in c
    assert nxt.memory.mib >= 15000 and nxt.recovered and nxt.try_number == 2
    assert set(crashed) <= nxt.avoid_gpus
    (second,) = c.run(11.0, gpus(2)).placed
    assert second.request.key == "a#2" and second.prior_ooms == 1 and second.waited_s == 1.0
    assert second.decision.gpu_uuids != crashed  # away from the GPU it crashed on

    last = c.recover("a#2", OOM, now=20.0, peak_mib=16000)
    assert isinstance(last, RetryPlan) and last.request.exclusive  # the last allowed try: a GPU alone
    (third,) = c.run(21.0, gpus(2)).placed
    assert third.prior_ooms == 2
    gave_up = c.recover("a#3", OOM, now=30.0, peak_mib=20000)
    # the one advice text (core/recovery.oom_advice): 20000 MiB x 1.25, rounded up to GiB
    assert isinstance(gave_up, GiveUp) and "CUDA OOM on 3 tries, the last at 20000 MiB" in gave_up.reason
    assert "executor_config={'carma': {'memory': '25GiB'}}" in gave_up.reason
    assert len(c) == 0 and len(c.reservations) == 0


def test_a_failure_that_is_not_an_oom_is_released_and_not_retried() -> None:
    c = cycle()
    c.submit(request("a#1", 1000), 0.0)
    c.run(0.0, gpus(1))
    plan = c.recover("a#1", Failure(FailureKind.OTHER, "ValueError"), now=1.0, peak_mib=None)
    assert isinstance(plan, GiveUp) and "author's retries apply" in plan.reason
    assert len(c) == 0 and len(c.reservations) == 0


def test_recover_without_resubmit_only_plans_and_releases() -> None:
    c = cycle()
    c.submit(request("a#1", 1000), 0.0)
    c.run(0.0, gpus(1))
    plan = c.recover("a#1", OOM, now=1.0, peak_mib=4000, resubmit=False)
    assert isinstance(plan, RetryPlan) and len(c) == 0 and len(c.reservations) == 0
    assert isinstance(c.recover("a#1", OOM, now=2.0, peak_mib=None), GiveUp)  # released already


def test_a_retry_waits_for_its_not_before() -> None:
    c = cycle()
    c.submit(request("a#1", 1000), 0.0)
    c.run(0.0, gpus(1))
    c.recover("a#1", OOM, now=5.0, peak_mib=2000, not_before=6.0)
    early = c.run(5.5, gpus(2))
    assert early.placed == () and dict(early.waiting) == {} and len(c) == 1
    (placed,) = c.run(6.0, gpus(2)).placed
    assert placed.request.key == "a#2" and placed.waited_s == 1.0


def test_hold_reserves_for_a_try_started_elsewhere() -> None:
    c = cycle()
    c.hold(request("orphan#3", 30000), ["GPU-0"], -100.0, prior_ooms=2)
    c.submit(request("new#1", 30000), 0.0)
    result = c.run(0.0, gpus(2))
    assert [p.decision.gpu_uuids for p in result.placed] == [("GPU-1",)]
    assert result.view.by_uuid["GPU-0"].tenants[0].key == "orphan#3"
    last = c.recover("orphan#3", OOM, now=1.0, peak_mib=30000)
    assert isinstance(last, GiveUp)  # its two earlier OOM tries count


def test_strict_fifo_blocks_behind_the_first_that_waits() -> None:
    c = SchedulingCycle(Placer(make_policy("most-free-memory")), Fifo())
    c.submit(request("big#1", 36000, submitted_at=0.0), 0.0)
    c.submit(request("small#1", 1000, submitted_at=1.0), 1.0)
    c.hold(request("held#1", 20000), ["GPU-0"], -100.0)
    result = c.run(2.0, [idle_gpu(0, used=20000, window=CALM)])
    assert result.placed == ()
    assert "queued behind label-big#1" in result.waiting["small#1"].summary


def test_next_starvation_at_is_the_earliest_bound_still_ahead() -> None:
    c = SchedulingCycle(Placer(make_policy("interference-aware")), Backfill(starvation_s=100.0))
    assert c.next_starvation_at(0.0) is None
    c.submit(request("a#1", 1000, submitted_at=10.0), 10.0)
    c.submit(request("b#1", 1000, submitted_at=50.0), 50.0)
    assert c.next_starvation_at(60.0) == 110.0
    assert c.next_starvation_at(120.0) == 150.0
    assert c.next_starvation_at(200.0) is None
    assert SchedulingCycle(Placer(make_policy("first-fit")), Fifo()).next_starvation_at(0.0) is None


@pytest.mark.parametrize(
    ("mode", "retries", "exclusive", "grows"),
    [(RetryMode.PAPER, 2 + 8, True, False), (RetryMode.BLIND, 2, False, False), (RetryMode.PLANNED, 2, False, True)],
)
def test_retry_modes_plan_as_named_and_stop_at_their_bound(
    mode: RetryMode, retries: int, exclusive: bool, grows: bool
) -> None:
    c = cycle(retry_mode=mode, recovery=RecoverySettings(max_oom_retries=2, exclusive_last=False))
    c.submit(request("a#1", 8000), 0.0)
    plans = []
    for n in range(1, retries + 2):
        c.run(float(n), gpus(4))
        plans.append(c.recover(f"a#{n}", OOM, now=n + 0.5, peak_mib=9000))
    *retried, last = plans
    assert len(retried) == retries and all(isinstance(p, RetryPlan) for p in retried)
    assert isinstance(last, GiveUp) and len(c) == 0
    first = retried[0]
    assert isinstance(first, RetryPlan)
    assert first.request.key == "a#2" and first.request.exclusive is exclusive
    assert (first.request.memory.mib > 8000) is grows


def test_learn_activity_reaches_waiting_and_running_tries() -> None:
    from carma_airflow.core.activity import estimate_activity

    c = cycle()
    c.submit(request("a#1", 30000), 0.0)
    c.run(0.0, gpus(1))
    c.submit(request("b#1", 30000), 1.0)  # waits: no room beside a#1
    measured = estimate_activity([0.3])
    assert c.learn_activity("a#1", measured)  # running: its tenant entry carries it
    assert c.reservations.get("a#1").activity == measured  # type: ignore[union-attr]
    (tenant,) = c.view(2.0, gpus(1)).gpus[0].tenants
    assert tenant.activity == measured
    assert c.learn_activity("b#1", measured)  # waiting: the next pass decides with it
    (waiting,) = c.waiting_requests()
    assert waiting.activity == measured
    c.release("a#1")
    (placed,) = c.run(3.0, gpus(1)).placed
    assert placed.request.activity == measured
    assert not c.learn_activity("gone#1", measured)


def test_each_plan_is_handed_the_waiting_set_once_each_in_the_last_plans_order_first() -> None:
    """A queue that only plans (no order key: no grouped pass) is handed the tries that stayed in
    the last plan's order, then those put in since (a nearly sorted list for the sort): exactly
    the waiting set, each try once, whatever came and went between passes, and the plan is the
    one of the waiting set in any order."""
    from carma_airflow.core.activity import estimate_activity

    class Recording(Backfill):
        def __init__(self) -> None:
            super().__init__()
            self.handed: list[list[TaskRequest]] = []

        def plan(self, pending: Sequence[TaskRequest], now: float, rank: Rank | None = None) -> QueuePlan:
            self.handed.append(list(pending))
            ordered = sorted(pending, key=Backfill.order_key(self, now, rank))  # no starving try here
            return QueuePlan(tuple(ordered), blocking=False, protected=None)

        def order_key(self, now: float, rank: Rank | None = None) -> None:
            return None  # only plans: every pass sorts the waiting set (as without a memory check)

    queue = Recording()
    c = SchedulingCycle(Placer(make_policy("interference-aware")), queue)
    for n, key in enumerate("abcdef"):  # a 30 GB try fills a GPU: one is placed a pass, the rest wait
        c.submit(request(f"{key}#1", 30000, priority=n), float(n))  # planned f first, then e, ...
    (placed,) = c.run(10.0, gpus(1)).placed
    assert placed.request.key == "f#1"
    assert [r.key for r in queue.handed[0]] == ["a#1", "b#1", "c#1", "d#1", "e#1", "f#1"]
    c.withdraw("c#1")
    c.learn_activity("d#1", estimate_activity([0.3]))  # a new request object for d#1
    c.submit(request("g#1", 30000, priority=9), 11.0)
    c.submit(request("h#1", 30000, priority=9), 11.0, not_before=12.0)  # held back, then due
    c.release("f#1")
    c.submit(placed.request, 0.0)  # the same object again, as a driver hands a try back
    c.run(13.0, gpus(1))
    handed = queue.handed[1]
    assert len({id(r) for r in handed}) == len(handed) == 7  # each once
    # the tries that stayed in the last plan's order (not the order they were put in), then the rest
    assert [r.key for r in handed] == ["e#1", "b#1", "a#1", "d#1", "g#1", "f#1", "h#1"]
    assert handed[3].activity is not None  # d#1's new object, not the one the last plan saw
    assert handed[3] is not queue.handed[0][3]
    assert queue.plan(handed, 13.0).ordered == queue.plan(sorted(handed, key=lambda r: r.key), 13.0).ordered


@pytest.mark.parametrize("waiting_decisions", [True, False])
@pytest.mark.parametrize("policy", ["interference-aware", "completion-time"])
def test_a_pass_with_a_limit_places_that_many_in_order_and_leaves_the_rest_undecided(
    policy: str, waiting_decisions: bool
) -> None:
    c = cycle(policy)
    for i in range(5):
        c.submit(request(f"t{i}#1", 8000), float(i))
    first = c.run(10.0, gpus(4), waiting_decisions=waiting_decisions, limit=2)
    assert [p.request.key for p in first.placed] == ["t0#1", "t1#1"]  # the queue's first two
    assert first.waiting == {} and first.never_fits == ()  # the rest not decided: no reason given
    assert len(c) == 3 and c.reservations.get("t2#1") is None
    # they kept their place and their time in the queue: the next pass places them first, with
    # the wait counted from their submission, not from the pass that reached its limit
    second = c.run(20.0, gpus(4), waiting_decisions=waiting_decisions, limit=2)
    assert [(p.request.key, p.waited_s) for p in second.placed] == [("t2#1", 18.0), ("t3#1", 17.0)]
    third = c.run(30.0, gpus(4), waiting_decisions=waiting_decisions)
    assert [p.request.key for p in third.placed] == ["t4#1"] and len(c) == 0


def test_a_limit_under_one_placement_is_refused() -> None:
    c = cycle()
    c.submit(request("a#1", 8000), 0.0)
    with pytest.raises(ValueError, match="at least 1 placement"):
        c.run(1.0, gpus(1), limit=0)
    assert len(c) == 1  # nothing taken out of the queue
