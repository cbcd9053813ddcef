"""Truth apart from knowledge: the simulated truth (beta, activity scale) drives the GPUs; the
placer only sees activities and an interference model learned from telemetry and ended tries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from carma_airflow.core import GpuSpec, TaskRequest, parse_gpu_list
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim import Arrival, SimConfig, TaskType, simulate
from carma_airflow.sim.engine import Simulation

LIGHT = TaskType("light", "light", "cnn", 32, 1, 2000, None, None, 4000, 600.0)
HEAVY = TaskType("heavy", "heavy", "transformer", 32, 1, 2000, None, None, 4000, 900.0)


def bursts(n: int = 200) -> list[Arrival]:
    """Bursts of four tries (they share the GPUs) with gaps between (some run alone)."""
    out, t = [], 0.0
    for j in range(n):
        out.append(Arrival(j, t, LIGHT if j % 2 else HEAVY))
        t += 100.0 if j % 4 else 1600.0
    return out


class Recording(Simulation):
    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.requests: list[TaskRequest] = []

    def _request(self, arrival: Arrival) -> TaskRequest:
        req = super()._request(arrival)
        self.requests.append(req)
        return req


def config(gpus: str = "2xA100-40GB", **kw: object) -> SimConfig:
    return replace(SimConfig(gpus=tuple(parse_gpu_list(gpus))), **kw)  # type: ignore[arg-type]


def test_default_truth_is_todays_calibration(four_a100: tuple[GpuSpec, ...], trace_t1: list[Arrival]) -> None:
    base = SimConfig(gpus=four_a100)
    explicit = replace(base, sharing=SharingModel(beta=0.5), activity_scale=1.0)
    assert simulate(base, trace_t1).summary() == simulate(explicit, trace_t1).summary()


def test_the_truth_drives_the_gpus(four_a100: tuple[GpuSpec, ...], trace_t1: list[Arrival]) -> None:
    base = SimConfig(gpus=four_a100, policy="most-free-memory", queue="fifo")
    mild = simulate(replace(base, sharing=SharingModel(beta=0.1)), trace_t1).summary()
    harsh = simulate(replace(base, sharing=SharingModel(beta=0.8)), trace_t1).summary()
    light = simulate(replace(base, activity_scale=0.6), trace_t1).summary()
    today = simulate(base, trace_t1).summary()
    assert mild["mean_slowdown"] < today["mean_slowdown"] < harsh["mean_slowdown"]
    assert light["mean_slowdown"] < today["mean_slowdown"]


@pytest.mark.parametrize("scale", [0.6, 1.0])
def test_requests_carry_learned_activities_never_the_truth(scale: float) -> None:
    sim = Recording(config(policy="predictive", activity_scale=scale))
    sim.run(bursts(80))
    first: dict[str, TaskRequest] = {}
    for r in sim.requests:
        first.setdefault(r.label.split("[")[0], r)
    assert all(r.activity is None for r in first.values())  # nothing known before a try ended
    later = [r for r in sim.requests if r.activity is not None]
    assert later
    reported = {"light": LIGHT.profile.sm_activity, "heavy": HEAVY.profile.sm_activity}
    for r in later:
        assert r.activity is not None
        # what the monitor reports (busy time), with its noise: not the true demand (scale x it)
        assert r.activity.sm_activity == pytest.approx(reported[r.label.split("[")[0]], abs=0.05)
        assert r.activity.source.startswith("median of")


def test_the_interference_model_is_learned_from_ended_tries() -> None:
    learned = {}
    for beta in (0.1, 0.8):
        sim = Simulation(config(policy="predictive", sharing=SharingModel(beta=beta)))
        sim.run(bursts())
        fit = sim.interference.fit_for("A100-40GB")
        assert fit.learned and fit.count >= 20
        assert sim.predictive is not None and sim.predictive.model is sim.interference
        learned[beta] = fit.beta * fit.activity_scale  # contention per unit of reported activity
    # both leave the prior (0.5 x 1.0) toward the truth
    assert learned[0.1] < 0.4
    assert learned[0.8] > 0.6


def test_other_policies_learn_activities_but_fit_nothing() -> None:
    sim = Simulation(config(policy="interference-aware"))
    sim.run(bursts(40))
    assert sim.activities and not sim.interference.fits


class Watching(Recording):
    """Records, at every pass, the activity each running try's reservation carries."""

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.tenant_activity: dict[str, list[tuple[float, float | None]]] = {}

    def _schedule(self) -> None:
        super()._schedule()
        for res in self.cycle.reservations:
            act = None if res.activity is None else res.activity.sm_activity
            self.tenant_activity.setdefault(res.key, []).append((self.now, act))


def test_a_try_s_activity_is_learned_while_it_runs_alone_and_its_tenant_entry_carries_it() -> None:
    # one long try alone, then two more of its type while it still runs (none has ended)
    trace = [Arrival(0, 0.0, HEAVY), Arrival(1, 100.0, HEAVY), Arrival(2, 200.0, HEAVY)]
    sim = Watching(config("1xA100-40GB", policy="predictive"))
    sim.run(trace)
    first, second, third = sim.requests
    assert first.activity is None and second.activity is None  # the first pass at 100 s samples it
    assert third.activity is not None and third.activity.source == "median of 1 try"
    assert third.activity.sm_activity == pytest.approx(HEAVY.profile.sm_activity, abs=0.08)
    # the running try counts at its measured activity from the pass that sampled it on
    assert sim.tenant_activity["job0#1"][-1][1] == pytest.approx(third.activity.sm_activity)
    # and the second try, told while it waited or ran, as well
    assert sim.tenant_activity["job1#1"][-1][1] is not None


def test_a_never_seen_type_borrows_from_a_learned_one_with_the_same_code() -> None:
    sibling = replace(HEAVY, name="heavy_long", solo_s=1800.0)  # same script and batch size
    stranger = TaskType("odd", "odd", "recsys", 32, 1, 2000, None, None, 4000, 600.0)
    # the pass at 300 s samples the first try (alone since its ramp); the sibling comes later
    trace = [Arrival(0, 0.0, HEAVY), Arrival(1, 300.0, HEAVY), Arrival(2, 400.0, sibling), Arrival(3, 500.0, stranger)]
    sim = Recording(config("4xA100-40GB", policy="predictive"))
    sim.run(trace)
    _, _, borrowed, none = sim.requests
    assert borrowed.activity is not None and borrowed.activity.count == 0
    assert "same code and batch size" in borrowed.activity.source
    assert borrowed.activity.confidence <= 0.6
    assert none.activity is None  # nothing alike learned


@pytest.mark.parametrize("progress", [True, False])
def test_progress_reports_give_interference_observations_without_solo_baselines(progress: bool) -> None:
    # pairs that always overlap: no try ever runs alone throughout, so no solo baseline exists,
    # but each starts alone for a while (its own speed alone, from its progress)
    out, t = [], 0.0
    for j in range(60):
        out.append(Arrival(j, t, HEAVY if j % 2 else LIGHT))
        t += 200.0 if j % 2 == 0 else 1000.0
    sim = Simulation(
        config("1xA100-40GB", policy="predictive", sharing=SharingModel(beta=0.1), progress_reports=progress)
    )
    sim.run(out)
    fit = sim.interference.fit_for("A100-40GB")
    if not progress:
        assert sim.know.observations == 0 and not fit.learned
        return
    assert fit.learned and sim.know.observations >= 10
    assert fit.beta * fit.activity_scale < 0.3  # toward the truth (0.1) from the prior (0.5)
