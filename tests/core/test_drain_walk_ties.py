"""A resumed drain walk (core/placement_drains.py, ``_replay``) that plays again a GPU placed on
whose drain the placement left as it was: its new entry ties its stale one in the walk's heap on
total, time and place.  The heap's keys never reach the facts (a count of entries pushed comes
first): found by ``bench/mixed_fleet.py`` (round 55), where such a tie raised TypeError
('<' not supported between GpuFacts) in the placement pass."""

from __future__ import annotations

from helpers import A100, view

from carma_airflow.core import GpuState, MemoryNeed, MetricWindow, Placer, TaskRequest, Tenant
from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.decision import Outcome
from carma_airflow.core.placement_drains import DrainPass
from carma_airflow.core.policies.completion_time import CompletionTime

QUIET = ActivityEstimate(0.0, 5, 0.0, 0.0, 0.0, 0.9, "test")  # computes nothing: slows nobody
HOT = ActivityEstimate(0.9, 5, 0.0, 0.9, 0.9, 0.9, "test")


def _gpu(index: int, free: int, tenants: tuple[tuple[str, ActivityEstimate], ...]) -> GpuState:
    used = A100.memory_mib - free
    held = tuple(
        Tenant(f"t{index}.{k}", f"{kind}[{index}.{k}]", used // len(tenants), -100.0, used // len(tenants), activity=a)
        for k, (kind, a) in enumerate(tenants)
    )
    return GpuState(f"GPU-{index}", index, A100, free, used, MetricWindow.constant(0.5, 0.3, 0.2), held, host="h")


def _request(
    key: str, mib: int, kind: str, activity: ActivityEstimate, avoid: frozenset[str] = frozenset()
) -> TaskRequest:
    return TaskRequest(
        key=key, label=f"{kind}[{key}]", memory=MemoryNeed(mib, "test"), activity=activity, avoid_gpus=avoid
    )


def test_a_walk_resumed_after_a_placement_that_left_a_drain_as_it_was_plays_it_again() -> None:
    policy = CompletionTime()
    runs = {"x": 200.0, "a": 205.0, "b": 210.0, "w": 300.0, "h": 10_000.0, "big": 500.0, "bigger": 600.0, "small": 5.0}
    for kind, seconds in runs.items():
        policy.learn_duration(kind, seconds)
    # the drain walk of a big try (no busy GPU fits it) plays GPU-0..3 in the order of their
    # bounds (100, 105, 110, 120 s left) and finds GPU-3 drains first: its quiet tenant is not
    # slowed, while each of the others has two hot tenants slowing each other; sharing GPU-4
    # beside its hot 10,000 s tenant costs more than waiting.  The small quiet try (kept off GPU-4)
    # collocates on GPU-0, the only room, and slows neither of its tenants: GPU-0's drain stays as it was
    hot2 = (("x", HOT), ("x", HOT))
    gpus = [
        _gpu(0, 8_000, hot2),
        _gpu(1, 1_000, (("a", HOT), ("a", HOT))),
        _gpu(2, 1_000, (("b", HOT), ("b", HOT))),
        _gpu(3, 1_000, (("w", QUIET),)),
        _gpu(4, 25_000, (("h", HOT),)),
    ]
    replayed: list[int] = []
    replay = DrainPass._replay

    def counted(self: DrainPass, scan: object, *args: object) -> None:
        replayed.append(len(self._placed_on))
        replay(self, scan, *args)  # type: ignore[arg-type]

    DrainPass._replay = counted  # type: ignore[method-assign]
    try:
        result = Placer(policy).schedule(
            [
                _request("b1", 20_000, "big", HOT),
                _request("s1", 2_000, "small", QUIET, frozenset({"GPU-4"})),
                _request("b2", 20_000, "bigger", HOT),  # another shape: priced, not waiting as b1 did
            ],
            view(*gpus),
        )
    finally:
        DrainPass._replay = replay  # type: ignore[method-assign]
    outcome = {d.request_key: d.outcome for d in result.decisions}
    assert outcome == {"b1": Outcome.NOT_NOW, "s1": Outcome.PLACED, "b2": Outcome.NOT_NOW}
    assert [d.gpu_uuids for d in result.placed] == [("GPU-0",)]
    assert replayed  # b2's walk was resumed after s1's placement and played GPU-0 again
