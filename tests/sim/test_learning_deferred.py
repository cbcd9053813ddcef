"""sim/learning.py: a shared stretch seen before its activities were known is kept and observed
once they are (issue 41: on t1 54 of 61 shared segments were dropped, so the fit never left its
prior), across days too; and sim/engine.py's learned peaks wait for a learned fit (core/vouch.py)."""

from __future__ import annotations

from dataclasses import replace

from carma_airflow.core import GpuSpec
from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.sim import SimConfig, Simulation, TaskType, load_trace, packaged
from carma_airflow.sim.learning import Knowledge, TrySegment


def _task(catalog: dict[str, TaskType], name: str) -> TaskType:
    return catalog[name]


def _est(value: float) -> ActivityEstimate:
    return ActivityEstimate(value, 3, 0.02, value - 0.05, value + 0.05, 0.9, "test")


def test_a_stretch_beside_an_unknown_co_tenant_is_observed_once_its_activity_is_learned(
    catalog: dict[str, TaskType],
) -> None:
    know = Knowledge(noise=0.0)
    a, b = sorted(catalog)[:2]
    know.activities[a] = _est(0.6)
    segments = [TrySegment(100.0, 100.0, ()), TrySegment(200.0, 100.0, (b,))]  # half speed beside b
    know.ended("k1", catalog[a], 300.0, segments, "A100-40GB")
    assert know.refit() is None  # b's activity is unknown: nothing to observe yet ...
    assert len(know._unresolved) == 1  # ... but the stretch is kept, not dropped
    know.activities[b] = _est(0.7)
    know._grew = True  # as learning b's first activity does
    model = know.refit()
    assert model is not None and know.observations == 1 and not know._unresolved
    obs = model.fit_for("A100-40GB").observations[0]
    assert abs(obs.stretch - 2.0) < 1e-9 and obs.task == a


def test_kept_stretches_carry_into_the_next_day(catalog: dict[str, TaskType]) -> None:
    day1 = Knowledge(noise=0.0)
    a, b = sorted(catalog)[:2]
    day1.activities[a] = _est(0.6)
    day1.ended("k1", catalog[a], 300.0, [TrySegment(100.0, 100.0, ()), TrySegment(200.0, 100.0, (b,))], "A100-40GB")
    day2 = Knowledge(noise=0.0)
    day2.carry_from(day1)
    day2.activities[b] = _est(0.7)
    assert day2.refit() is not None and day2.observations == 1
    fresh = Knowledge(noise=0.0)
    fresh.carry_from(day1, fit=False)
    assert not fresh._unresolved


def test_learned_peaks_wait_for_a_learned_fit(catalog: dict[str, TaskType], four_a100: tuple[GpuSpec, ...]) -> None:
    t1 = load_trace(packaged("trace_t1.csv"), catalog)
    cfg = SimConfig(gpus=four_a100, estimator="history+gpumemnet")
    day1 = Simulation(cfg)
    day1.run(list(t1))
    vouched = Simulation(cfg, peaks=day1.peaks)  # the peaks, but a fit at its prior
    taken = Simulation(replace(cfg, vouch_peaks=False), peaks=day1.peaks)
    assert not vouched._vouched()
    waiting = [r for r in (vouched._request(a) for a in t1) if "learned peaks" in r.memory.source]
    assert waiting, "no learned peak below GPUMemNet's estimate on t1: the premise is gone"
    assert all(r.memory.source.startswith("gpumemnet") for r in waiting)
    assert all("learned peaks" not in taken._request(a).memory.source for a in t1)
    assert any(taken._request(a).memory.mib < vouched._request(a).memory.mib for a in t1)
    fit = day1.know.interference.fit_for("A100-40GB")
    learned = fit.observe_all(fit.observations * 10)  # as if many more tries had shared alike
    vouched.know.interference = type(day1.know.interference)({"a100-40gb": learned})
    assert vouched._vouched()  # once the fit is learned, the peaks count
    assert all("learned peaks" not in vouched._request(a).memory.source for a in t1)


def test_a_whole_shared_try_is_timed_against_runs_alone_on_its_own_gpu_model(catalog: dict[str, TaskType]) -> None:
    # without progress reports a shared try is timed whole against its type's runs alone: on the
    # model it shared (an L4 try against H100 runs would read the pair's speed ratio as interference)
    know = Knowledge(noise=0.0, progress=False)
    a, b = sorted(catalog)[:2]
    know.activities[a], know.activities[b] = _est(0.6), _est(0.7)
    know.ended("s1", catalog[a], 100.0, [TrySegment(100.0, 100.0, ())], "H100-80GB")  # alone on an H100
    shared = [TrySegment(1_200.0, 100.0, (b,))]
    know.ended("k1", catalog[a], 1_200.0, shared, "L4")
    assert know.refit() is None and len(know._unresolved) == 1  # no run alone on an L4 yet: kept
    know.ended("s2", catalog[a], 400.0, [TrySegment(400.0, 100.0, ())], "L4")  # now one
    model = know.refit()
    assert model is not None and know.observations == 1 and not know._unresolved
    (obs,) = model.fit_for("L4").observations
    assert abs(obs.stretch - 3.0) < 1e-9  # 1,200 s over 400 s alone there, not over the H100's 100 s
