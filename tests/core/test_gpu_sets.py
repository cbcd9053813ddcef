"""A multi-GPU try's GPU sets on a fleet of several models (core/gpu_sets.py): one model first, a
mixed set priced at its slowest GPU's pace, waiting priced at the drained set's pace."""

from __future__ import annotations

import re

from helpers import H100, busy_gpu, idle_gpu, request, view

from carma_airflow.core import Placer
from carma_airflow.core.decision import Outcome
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.gpu_sets import first_set, paced, set_key, spare_sets
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionTime

V100 = gpu_spec("V100-32GB")
RUNS = {"label-r": {"H100-80GB": 600.0, "V100-32GB": 3000.0}}


def _learned(runs: dict[str, dict[str, float]]) -> CompletionTime:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    for label, by_model in runs.items():
        for model, seconds in by_model.items():
            policy.learn_duration(label, seconds, model)
    return policy


def test_a_two_gpu_try_takes_two_gpus_of_one_model_not_a_fast_and_a_slow_one() -> None:
    # idle: one H100 and two V100s. Before: the V100s were kept from it because its run is shorter
    # on an H100 (there is one idle, it asks for two), so it waited with three idle GPUs; where the
    # keep let it, the idle scan took the H100 and a V100 (at the V100's pace, the H100 held idle)
    policy = _learned(RUNS)
    r = request("r", 4000, gpus=2)
    d = Placer(policy).schedule([r], view(idle_gpu(0, H100), idle_gpu(1, V100), idle_gpu(2, V100))).by_key["r"]
    assert d.outcome is Outcome.PLACED and d.gpu_uuids == ("GPU-1", "GPU-2")


def test_a_two_gpu_try_takes_two_fast_gpus_when_they_are_idle() -> None:
    policy = _learned(RUNS)
    r = request("r", 4000, gpus=2)
    d = Placer(policy).schedule([r], view(idle_gpu(0, V100), idle_gpu(1, H100), idle_gpu(2, H100))).by_key["r"]
    assert d.gpu_uuids == ("GPU-1", "GPU-2")


def test_a_mixed_idle_set_is_priced_at_the_slow_pace_and_taken_only_where_nothing_beats_it() -> None:
    r = request("r", 4000, gpus=2)
    # the other H100 is busy for hours: the H100 and the V100 (at the V100's pace) are the soonest
    policy = _learned({**RUNS, "tenant2-0": {"H100-80GB": 90_000.0}})
    gpus = (idle_gpu(0, H100), idle_gpu(1, V100), busy_gpu(2, 3_000, spec=H100))
    d = Placer(policy).schedule([r], view(*gpus)).by_key["r"]
    assert sorted(d.gpu_uuids) == ["GPU-0", "GPU-1"]
    assert "5.00x slower" in d.explain()  # 3,000 s at the V100's pace against 600 s on H100s
    # the other H100 drains in 30 s: it waits for the H100 pair (630 s) rather than run 3,000 s
    policy = _learned({**RUNS, "tenant2-0": {"H100-80GB": 1030.0}})
    d = Placer(policy).schedule([r], view(*gpus)).by_key["r"]
    assert d.outcome is Outcome.NOT_NOW


def test_a_starving_try_takes_a_mixed_set_at_once() -> None:
    # past its starvation bound it must start: the first idle set, as before
    policy = _learned({**RUNS, "tenant2-0": {"H100-80GB": 1030.0}})
    r = request("r", 4000, gpus=2)
    gpus = (idle_gpu(0, H100), idle_gpu(1, V100), busy_gpu(2, 3_000, spec=H100))
    d = Placer(policy).schedule([r], view(*gpus), protected=r).by_key["r"]
    assert d.gpu_uuids == ("GPU-0", "GPU-1")


def test_a_priced_set_leaves_the_fast_gpu_where_a_slow_one_costs_the_same() -> None:
    policy = _learned(RUNS)
    placer = Placer(policy)
    state = placer._pass(view(idle_gpu(0, H100), idle_gpu(1, V100), idle_gpu(2, V100)))
    choice = policy.choose(request("r", 4000, gpus=2), state.facts, lambda: (float("inf"), None), 2)
    assert choice.best is not None
    assert [f.index for f in choice.best.gpus] == [1, 2]  # not the H100 and a V100
    assert choice.best.done_in == 3000.0  # at the V100's pace


def test_waiting_is_priced_on_the_set_whose_drain_and_run_end_soonest() -> None:
    # two V100s drain in 10 and 20 s, two H100s in about 500 s: the try runs 3,000 s on V100s and
    # 600 s on H100s, so the H100 pair (about 1,100 s) is the wait it prices, not the V100 pair's 3,020 s
    policy = _learned(
        {
            **RUNS,
            "tenant0-0": {"V100-32GB": 1010.0},
            "tenant1-0": {"V100-32GB": 1020.0},
            "tenant2-0": {"H100-80GB": 1500.0},
            "tenant3-0": {"H100-80GB": 1520.0},
            "tenant4-0": {"V100-32GB": 90_000.0},
            "tenant5-0": {"V100-32GB": 90_000.0},
        }
    )
    gpus = (
        busy_gpu(0, 1_000, spec=V100),
        busy_gpu(1, 1_000, spec=V100),
        busy_gpu(2, 1_000, spec=H100),
        busy_gpu(3, 1_000, spec=H100),
        busy_gpu(4, 20_000, spec=V100),  # room to share: the two V100s a share option is priced on
        busy_gpu(5, 20_000, spec=V100),
    )
    d = Placer(policy).schedule([request("r", 4000, gpus=2)], view(*gpus)).by_key["r"]
    assert d.outcome is Outcome.NOT_NOW
    wait = re.search(r"chose waiting at ([0-9.]+) min", d.explain())
    assert wait is not None and float(wait.group(1)) < 25.0  # the H100 pair's; the V100 pair's is 50 min


def test_the_helpers_group_per_host_and_model() -> None:
    policy = _learned(RUNS)
    facts = (
        Placer(policy)
        ._pass(view(idle_gpu(0, H100), idle_gpu(1, V100), idle_gpu(2, V100, host="b"), idle_gpu(3, H100, host="b")))
        .facts
    )
    assert set_key(facts[0], True) == ("localhost", "H100-80GB") and set_key(facts[0], False) == "localhost"
    levels = list(paced(facts[:2], 2, {"H100-80GB": 600.0, "V100-32GB": 3000.0}.__getitem__))
    assert [(m, [f.index for f in gpus]) for m, gpus in levels] == [("V100-32GB", [0, 1])]
    assert [f.index for f in first_set(facts, 2) or []] == [0, 1]
    groups = {set_key(f, True): [f] for f in facts[:3]}  # host b holds one of them: no set there
    assert [f.index for f in spare_sets(groups, 2)] == [0, 1]
