"""A mixed fleet's slower idle GPU priced beside the faster models' options (``price_slow_idle``, round 52).

Before, a one-GPU try took the first idle GPU unpriced (the fastest model first); where only a
slower model was idle, the speed keep let it wait for a faster busy GPU only where that GPU's drain
plus its run there beat the idle one (core/speed_keep.py, ``price_slow_idle=False`` here).  Now the
slower idle GPU is one option of the completion-time rule, beside sharing a GPU of a model the try
runs faster on and waiting for one to drain (drain, behind the tries of the pass that wait for it,
plus the run at that model's speed).
"""

from __future__ import annotations

from dataclasses import replace

from helpers import H100, busy_gpu, idle_gpu, request, view

from carma_airflow.core import Placer
from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.gpu import ClusterView, GpuState, gpu_spec
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionTime

V100 = gpu_spec("V100-32GB")


def _policy(runs: dict[str, dict[str, float]], priced: bool) -> CompletionTime:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    policy.settings = replace(policy.settings, price_slow_idle=priced)
    for label, by_model in runs.items():
        for model, seconds in by_model.items():
            policy.learn_duration(label, seconds, model)
    return policy


def _decided(policy: CompletionTime, v: ClusterView) -> Decision:
    return Placer(policy).schedule([request("r", 4000)], v).by_key["r"]


def _both(runs: dict[str, dict[str, float]], *gpus: GpuState) -> tuple[Decision, Decision]:
    """The decision for try ``r`` without and with the slower idle GPU priced."""
    return _decided(_policy(runs, False), view(*gpus)), _decided(_policy(runs, True), view(*gpus))


# r runs 600 s alone on an H100, 3,000 s on a V100
R = {"label-r": {"H100-80GB": 600.0, "V100-32GB": 3000.0}}


def test_a_slow_idle_gpu_loses_to_sharing_a_faster_busy_one() -> None:
    # the H100's tenant has 5,000 s left and room beside it: waiting for it (5,000 + 600 s) loses to
    # the idle V100 (3,000 s), so by default the V100 is taken; sharing the H100 was never priced
    runs = {**R, "tenant0-0": {"H100-80GB": 6000.0}}
    before, after = _both(runs, busy_gpu(0, 60_000, spec=H100), idle_gpu(1, V100))
    assert before.gpu_uuids == ("GPU-1",)
    assert after.outcome is Outcome.PLACED and after.gpu_uuids == ("GPU-0",) and after.collocated
    assert "GPU 1 (V100-32GB)" in after.explain()  # the idle V100 was priced, and says so


def test_the_slow_idle_gpu_is_taken_where_no_faster_option_beats_it() -> None:
    # the H100 is full for 5,000 s more: neither sharing it nor waiting for it beats the V100's 3,000 s
    runs = {**R, "tenant0-0": {"H100-80GB": 6000.0}}
    before, after = _both(runs, busy_gpu(0, 1_000, spec=H100), idle_gpu(1, V100))
    assert before.gpu_uuids == after.gpu_uuids == ("GPU-1",)


def test_only_faster_models_compete_with_the_slow_idle_gpu() -> None:
    # a busy V100 with room is no faster than the idle one: it is not priced, so never shared instead
    runs = {**R, "tenant0-0": {"H100-80GB": 6000.0}, "tenant2-0": {"V100-32GB": 1100.0}}
    gpus = (busy_gpu(0, 1_000, spec=H100), idle_gpu(1, V100), busy_gpu(2, 30_000, spec=V100))
    _, after = _both(runs, *gpus)
    assert after.gpu_uuids == ("GPU-1",) and not after.collocated
    assert "GPU 2 (V100-32GB)" not in after.explain()  # sharing it was not priced (waiting for it was)


def test_waiting_is_priced_at_the_drained_models_speed() -> None:
    # both busy GPUs are full: the V100 drains in about 10 s, the H100 in about 200 s. Waiting for the
    # soonest drain (the V100: 10 + 3,000 s) would lose to the idle V100; waiting for the H100
    # (200 + 600 s) wins
    runs = {**R, "tenant0-0": {"H100-80GB": 1200.0}, "tenant2-0": {"V100-32GB": 1010.0}}
    gpus = (busy_gpu(0, 1_000, spec=H100), idle_gpu(1, V100), busy_gpu(2, 1_000, spec=V100))
    _, after = _both(runs, *gpus)
    assert after.outcome is Outcome.NOT_NOW
    assert "waiting at 13.3 min" in after.summary  # 200 s to the H100's drain, then its 600 s


def test_a_fleet_of_one_model_is_unchanged() -> None:
    runs = {"label-r": {"V100-32GB": 3000.0}, "tenant0-0": {"V100-32GB": 6000.0}}
    before, after = _both(runs, busy_gpu(0, 30_000, spec=V100), idle_gpu(1, V100))
    assert before.gpu_uuids == after.gpu_uuids == ("GPU-1",)


def test_a_later_try_waits_behind_the_claim_of_an_earlier_one_where_that_still_ends_sooner() -> None:
    # the H100 is full and drains in about 200 s; r0 waits for it (200 + 600 s, and the queue's share:
    # 0.35 x 1 waiting besides it / 2 GPUs x 600 s: 15.1 min). Without a queue of claims r1 could not
    # count on that H100 and took the idle V100 (3,000 s); behind r0 it starts at about 800 s (25.1 min)
    tries = [replace(request(f"r{i}", 4000), label="label-r", submitted_at=float(i)) for i in range(2)]
    gpus = (busy_gpu(0, 1_000, spec=H100), idle_gpu(1, V100))
    runs = {"label-r": {"H100-80GB": 600.0, "V100-32GB": 3000.0}, "tenant0-0": {"H100-80GB": 1200.0}}
    result = Placer(_policy(runs, True)).schedule(tries, view(*gpus))
    r0, r1 = result.by_key["r0"], result.by_key["r1"]
    assert r0.outcome is r1.outcome is Outcome.NOT_NOW
    assert "waiting at 15.1 min" in r0.summary and "waiting at 25.1 min" in r1.summary, (r0.summary, r1.summary)
    # where the V100 runs it in 1,000 s, r1 behind r0 (1,400 s) loses to it: r1 takes the V100
    runs = {"label-r": {"H100-80GB": 600.0, "V100-32GB": 1000.0}, "tenant0-0": {"H100-80GB": 1200.0}}
    result = Placer(_policy(runs, True)).schedule(tries, view(*gpus))
    assert result.by_key["r0"].outcome is Outcome.NOT_NOW and result.by_key["r1"].gpu_uuids == ("GPU-1",)


def test_a_deep_queue_of_one_shape_takes_the_slow_idle_gpus_once_the_wait_behind_the_claims_is_longer() -> None:
    # twelve tries of one type: each waits behind the claims before it until waiting there costs more
    # than the idle V100 (3,000 s and its queue share); the last take the two V100s (and may share
    # them). The memo of waiting shapes gave the first try's wait to all of them: the V100s stayed idle
    runs = {"label-r": {"H100-80GB": 600.0, "V100-32GB": 3000.0}, "tenant0-0": {"H100-80GB": 1200.0}}
    gpus = (busy_gpu(0, 1_000, spec=H100), idle_gpu(1, V100), idle_gpu(2, V100))
    tries = [replace(request(f"r{i:02}", 4000), label="label-r", submitted_at=float(i)) for i in range(12)]
    scheduled = Placer(_policy(runs, True)).schedule(tries, view(*gpus))
    assert {d.gpu_uuids for d in scheduled.placed} == {("GPU-1",), ("GPU-2",)}
    assert "r11" in {d.request_key for d in scheduled.placed} and len(scheduled.placed) < 6
    assert scheduled.by_key["r00"].outcome is Outcome.NOT_NOW  # the first still waits for the H100
    # the grouped pass (the simulator's and a deep queue's) places the same
    grouped = Placer(_policy(runs, True)).place([tries], view(*gpus), order_key=lambda r: (r.submitted_at, r.key))
    assert [d.gpu_uuids for d in grouped.placed] == [d.gpu_uuids for d in scheduled.placed]
    assert [d.request_key for d in grouped.placed] == [d.request_key for d in scheduled.placed]


def test_a_model_within_the_margin_leaves_the_idle_gpu_unpriced() -> None:
    # the H100 runs r 5 % faster than the V100 (2,850 s against 3,000 s): within WAIT_MARGIN, so the
    # idle V100 is taken as on one model, not priced against sharing the H100 (which wins the pricing
    # at 5x: the first test above)
    runs = {"label-r": {"H100-80GB": 2850.0, "V100-32GB": 3000.0}, "tenant0-0": {"H100-80GB": 6000.0}}
    before, after = _both(runs, busy_gpu(0, 60_000, spec=H100), idle_gpu(1, V100))
    assert before.gpu_uuids == after.gpu_uuids == ("GPU-1",) and not after.collocated
    assert "GPU 0 (H100-80GB)" not in after.explain()  # sharing it was never priced
