"""The deep-queue paths decide as the plain ones: a pass without waiting decisions
(``SchedulingCycle.run(waiting_decisions=False)``, ``Placer.place``) places and refuses the same
tries in the same order, and a placer that keeps its pools from pass to pass decides exactly as
a fresh one.  Randomised, seeded scenarios over several passes with time moving on."""

from __future__ import annotations

import random

import pytest
from helpers import A100, L4

from carma_airflow.core import Backfill, Fifo, GpuState, MemoryNeed, MetricWindow, Placer, SchedulingCycle, TaskRequest
from carma_airflow.core.cycle import CycleResult
from carma_airflow.core.policies import make_policy
from carma_airflow.core.queueing import QueueDiscipline
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.waitlist import WaitList

POLICIES = (
    "interference-aware",
    "most-free-memory",
    "best-fit",
    "first-fit",
    "exclusive",
    "least-utilised",
    "completion-time",
)


def _gpus(rng: random.Random, n: int) -> list[GpuState]:
    out = []
    for i in range(n):
        spec = L4 if i % 7 == 6 else A100
        used = rng.choice((0, 0, 2_000, 9_000, 20_000))
        act = rng.choice((0.05, 0.3, 0.6, 0.85))
        window = MetricWindow.constant(act, rng.choice((0.2, 0.5)), rng.choice((0.1, 0.45)))
        out.append(
            GpuState(
                f"GPU-{i}",
                i % 4,
                spec,
                spec.memory_mib - used,
                used,
                window,
                host=f"h{i // 4}",
            )
        )
    return out


def _request(rng: random.Random, k: int, now: float) -> TaskRequest:
    whole = rng.random() < 0.1
    mib = rng.choice((2_000, 6_000, 6_000, 12_000, 20_000, 30_000))
    return TaskRequest(
        key=f"r{k}",
        label=f"task{k}",
        memory=MemoryNeed(mib, "whole-gpu" if whole else "gpumemnet", whole_gpu=whole),
        gpus=2 if rng.random() < 0.15 else 1,
        exclusive=rng.random() < 0.05,
        priority=rng.choice((0, 0, 0, 1)),
        submitted_at=round(now - rng.uniform(0.0, 400.0), 3),
        recovered=rng.random() < 0.1,
        avoid_gpus=frozenset({"GPU-1"}) if rng.random() < 0.1 else frozenset(),
        gpu_model="L4" if rng.random() < 0.03 else None,
    )


def _cycle(policy: str, queue: QueueDiscipline) -> SchedulingCycle:
    return SchedulingCycle(Placer(make_policy(policy)), queue, reservations=Reservations(seen_after_s=30.0))


def _submit_random(rng: random.Random, k: int, now: float, *cycles: SchedulingCycle) -> int:
    """Put 0-40 random requests (numbered from ``k``) into each cycle alike; the next number."""
    for _ in range(rng.randint(0, 40)):
        r = _request(rng, k, now)
        k += 1
        for c in cycles:
            c.submit(r, now)
    return k


def assert_same_pass(a: CycleResult, b: CycleResult) -> None:
    """Two passes placed, refused and explained every try alike."""
    assert [(p.request.key, p.decision) for p in a.placed] == [(p.request.key, p.decision) for p in b.placed]
    assert [(n.request.key, n.decision) for n in a.never_fits] == [(n.request.key, n.decision) for n in b.never_fits]
    assert a.reserved_for == b.reserved_for
    assert dict(a.waiting) == dict(b.waiting)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fifo", [False, True])
def test_a_pass_without_waiting_decisions_places_and_refuses_the_same(seed: int, policy: str, fifo: bool) -> None:
    rng = random.Random(seed * 101 + len(policy))
    monitor = _gpus(rng, rng.randint(6, 20))
    plain = _cycle(policy, Fifo() if fifo else Backfill(aging_s=60.0, starvation_s=150.0))
    fast = _cycle(policy, Fifo() if fifo else Backfill(aging_s=60.0, starvation_s=150.0))
    now, k = 1_000.0, 0
    placed_any = 0
    for _ in range(12):
        k = _submit_random(rng, k, now, plain, fast)
        a = plain.run(now, monitor)
        b = fast.run(now, monitor, waiting_decisions=False)
        assert [(p.request.key, p.decision) for p in a.placed] == [(p.request.key, p.decision) for p in b.placed]
        assert [n.request.key for n in a.never_fits] == [n.request.key for n in b.never_fits]
        assert a.reserved_for == b.reserved_for
        assert set(a.waiting) == {r.key for r in fast.waiting_requests() if r.key in fast}
        assert b.waiting == {}
        assert plain.next_starvation_at(now) == fast.next_starvation_at(now)
        placed_any += len(a.placed)
        running = sorted(r.key for r in plain.reservations)
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 6))):
            plain.release(key)
            fast.release(key)
        now += rng.choice((0.0, 5.0, 31.0, 200.0))
    assert placed_any > 0  # the scenario exercises placements, not only waiting


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("limited", [False, True])
def test_a_grouped_pass_gives_each_waiting_try_the_decision_the_plain_pass_gives(
    seed: int, policy: str, limited: bool
) -> None:
    """A pass with waiting decisions over the groups (a few tries decided per shape) places,
    refuses and explains exactly as one that decides every try in the queue's order: each waiting
    try gets the same decision (the first of its shape that waited, shared), the protected try
    its own, and with a limit the tries past the last placed one get none."""
    rng = random.Random(seed * 7 + len(policy) + limited)
    monitor = _gpus(rng, rng.randint(6, 20))
    plain = _cycle(policy, Backfill(aging_s=60.0, starvation_s=150.0))
    plain._grouped = False  # the pass that decides every try (a queue without an order key)
    grouped = _cycle(policy, Backfill(aging_s=60.0, starvation_s=150.0))
    now, k = 1_000.0, 0
    explained = cut = 0
    for _ in range(16):
        k = _submit_random(rng, k, now, plain, grouped)
        limit = rng.choice((1, 3, 8, 20)) if limited else None
        a = plain.run(now, monitor, limit=limit)
        b = grouped.run(now, monitor, limit=limit)
        assert_same_pass(a, b)
        explained += len(b.waiting)
        cut += len(b.waiting) < len(grouped)  # some waiting tries were past the limit
        running = sorted(r.key for r in plain.reservations)
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 6))):
            plain.release(key)
            grouped.release(key)
        now += rng.choice((0.0, 5.0, 31.0, 200.0))
    assert explained > 0
    assert not limited or cut > 0  # the limit cut some pass short


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("policy", (*POLICIES, "round-robin", "static-2"))
def test_a_placer_that_keeps_its_pools_decides_as_a_fresh_one(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    monitor = _gpus(rng, rng.randint(4, 16))
    kept = Placer(make_policy(policy))
    book = Reservations(seen_after_s=30.0)
    now = 500.0
    for step in range(15):
        pending = [_request(rng, step * 100 + j, now) for j in range(rng.randint(1, 25))]
        view = book.view(now, monitor)
        plan = Backfill().plan(pending, now)
        got = kept.schedule(plan.ordered, view, protected=plan.protected)
        want = Placer(make_policy(policy)).schedule(plan.ordered, view, protected=plan.protected)
        if policy == "round-robin":  # its ring moves with every placement: compare the first pass only
            assert step > 0 or got.decisions == want.decisions
            continue
        assert got.decisions == want.decisions
        assert kept.decide(pending[0], view) == Placer(make_policy(policy)).decide(pending[0], view)
        for d in got.placed[: rng.randint(0, 3)]:
            r = next(p for p in pending if p.key == d.request_key)
            book.reserve(r.key, r.label, d.gpu_uuids, r.memory.mib, now)
        running = [r.key for r in book]
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 2))):
            book.release(key)
        if rng.random() < 0.3:  # a monitor reading changes
            i = rng.randrange(len(monitor))
            g = monitor[i]
            monitor[i] = GpuState(g.uuid, g.index, g.spec, g.free_mib, g.used_mib, MetricWindow.constant(0.9, 0.5, 0.5))
        now += rng.choice((0.0, 1.0, 29.99, 30.0, 45.0))


def test_place_needs_a_policy_that_checks_memory() -> None:
    with pytest.raises(ValueError, match="checks memory"):
        Placer(make_policy("round-robin")).place([], _cycle("first-fit", Backfill()).view(0.0, []), order_key=repr)


def test_the_wait_list_keeps_submission_order_and_the_next_bound() -> None:
    wl = WaitList(lambda r: r.memory.mib)
    reqs = [
        TaskRequest(key=k, label=k, memory=MemoryNeed(m, "x"), submitted_at=t)
        for k, m, t in (("c", 1, 30.0), ("a", 2, 10.0), ("b", 1, 20.0), ("d", 2, 10.0))
    ]
    for r in reqs:
        wl.add(r)
    assert [r.key for r in wl.groups()[0]] == ["b", "c"]
    assert [r.key for r in wl.groups()[1]] == ["a", "d"]
    assert wl.oldest() is reqs[1]
    assert wl.next_bound(100.0, 115.0) == 120.0
    assert wl.next_bound(100.0, 130.0) is None
    wl.remove(reqs[1])
    assert wl.oldest() is reqs[3] and len(wl) == 3
    with pytest.raises(KeyError):
        wl.remove(reqs[1])


@pytest.mark.parametrize("many", [5, 64, 300])
def test_removing_many_at_once_leaves_what_removing_each_leaves(many: int) -> None:
    rng = random.Random(many)
    reqs = [
        TaskRequest(
            key=f"r{k}", label="x", memory=MemoryNeed(rng.choice((1, 2, 3, 4)), "x"), submitted_at=rng.uniform(0, 50)
        )
        for k in range(600)
    ]
    one, batch = WaitList(lambda r: r.memory.mib), WaitList(lambda r: r.memory.mib)
    for r in reqs:
        one.add(r)
        batch.add(r)
    gone = rng.sample(reqs, k=many)
    if many >= 64:  # a group emptied too
        gone += [r for r in reqs if r.memory.mib == 4]
    gone = list({r.key: r for r in gone}.values())
    for r in gone:
        one.remove(r)
    batch.remove_all(gone)
    assert len(batch) == len(one) == len(reqs) - len(gone)
    assert [[r.key for r in g] for g in batch.groups()] == [[r.key for r in g] for g in one.groups()]
    assert batch.oldest() is one.oldest()
    assert batch.next_bound(20.0, 40.0) == one.next_bound(20.0, 40.0)
    for r in reqs:  # what is left can be removed, what is gone cannot
        if r in gone:
            with pytest.raises(KeyError):
                batch.remove(r)
    left = [r for r in reqs if r not in gone]
    with pytest.raises(KeyError):  # one gone among many still here: nothing is taken out
        batch.remove_all([*left[:69], gone[0]])
    assert len(batch) == len(left)
    with pytest.raises(ValueError, match="twice"):
        batch.remove_all(left[:1] * 70)
