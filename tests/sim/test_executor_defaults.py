"""The simulator plays what the executor does by default (issue 41): a platform team that evaluates
with ``carma simulate`` before deploying must see the system it deploys.  Each default the two
share is compared programmatically, so a default changed on one side alone fails here: the memory
estimate, the policy and its tenant cap and floor, the queue and its starvation bound, the placer's
constants (reserve, headroom, floor, lock), the OOM recovery (retries, headroom, the request
bound), the fence (mechanism, cap rule, margin).  Then both are fed the same tries and must decide
the same: the executor's intake and placement parts (executor/tries/intake.py, executor/flow/parts.py) and
the simulator's (sim/engine.py), each through core's SchedulingCycle with its default settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from carma_airflow.config.options import OPTIONS
from carma_airflow.config.settings import CarmaSettings
from carma_airflow.config.task_config import GpuTaskConfig
from carma_airflow.core import parse_gpu_list
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.estimators import TaskMemoryInfo, make_estimator
from carma_airflow.core.fence_host import resolve
from carma_airflow.core.fencing import CapRule, FenceModel, IsolationMode
from carma_airflow.core.recovery import RetryMode, max_retry_request_mib
from carma_airflow.executor.flow import placement_parts, recovery_settings
from carma_airflow.executor.learning import Learned
from carma_airflow.executor.tries import first_request
from carma_airflow.sim import Arrival, SimConfig, Simulation
from carma_airflow.sim.fencing import host_profile, parse_host, sim_fence
from carma_airflow.sim.workload import TaskType

GPUS = tuple(parse_gpu_list("4xA100-40GB"))
# catalogue rows with every estimator's figure, as the packaged catalogue has them: the executor
# never knows the GPUMemNet, Horus or FakeTensor figure, so its default must not read them
TASKS = (
    TaskType("resnet", "resnet.py", "cnn", 64, 1, 9000, 21525, 3121, 16000, 600.0),
    TaskType("bert", "bert.py", "transformer", 32, 1, 14000, 30000, 9000, 40000, 900.0),
    TaskType("small", "small.py", "cnn", 32, 1, 2000, 3000, 1000, 2000, 300.0),
    TaskType("pair", "pair.py", "cnn", 32, 2, 7000, 8000, 4000, 8000, 1200.0),
)


@pytest.fixture
def settings(tmp_path: Path) -> CarmaSettings:
    """Every ``[carma]`` option at its default."""
    return CarmaSettings.load(lambda name: None, str(tmp_path))


def _knobs(policy: object) -> dict[str, object]:
    """A policy's settings by value: its numbers, names and settings dataclasses, and those of the
    parts it holds (its floor's min_gain); not what it learns (its forecast, empty at the start)."""
    out: dict[str, object] = {"type": type(policy).__name__}
    for name, value in vars(policy).items():
        if isinstance(value, (int, float, str, bool, type(None), tuple, frozenset)) or hasattr(
            value, "__dataclass_fields__"
        ):
            out[name] = value
        elif hasattr(value, "__dict__") and name in ("floor",):
            out[name] = _knobs(value)
    return out


def _option(name: str) -> str:
    return next(o.default for o in OPTIONS if o.name == name)


def test_the_simulators_defaults_are_the_executors(settings: CarmaSettings) -> None:
    cfg = SimConfig(gpus=GPUS)
    sim = Simulation(cfg)
    placer, queue, _ = placement_parts(settings)
    assert cfg.policy == settings.policy and sim.placer.policy.name == placer.policy.name
    assert _knobs(sim.placer.policy) == _knobs(placer.policy)  # the tenant cap, the floor (min_gain), every knob
    assert cfg.min_gain is None and settings.min_gain_value is None
    assert sim.placer.settings == placer.settings  # reserve, headroom, floor, lock seconds, and the rest
    assert cfg.queue == settings.queue and type(sim.queue) is type(queue) and vars(sim.queue) == vars(queue)
    # OOM recovery: the retries, the headroom, the request bound (the largest GPU less reserve and headroom)
    largest = max(g.memory_mib for g in GPUS)
    executor_recovery = recovery_settings(settings, max_retry_request_mib(largest, 512, 2048))
    assert sim.cycle.recovery == executor_recovery
    assert RetryMode(cfg.recovery_mode()) is RetryMode.PLANNED  # the executor plans every retry
    # the fence: the mechanism asked for, resolved on the common host, its cap rule and margin
    assert cfg.isolation == settings.isolation and cfg.host == "framework"
    rule = CapRule(settings.isolation_cap)
    executor_fence = resolve(IsolationMode.parse(settings.isolation), host_profile(parse_host(cfg.host)), rule)
    fence = sim_fence(cfg)
    assert fence.model == FenceModel.of(executor_fence.mode, rule)
    assert fence.model.kept_margin_mib(cfg.settings.headroom_mib) == FenceModel.of(
        executor_fence.mode, rule
    ).kept_margin_mib(settings.isolation_margin_mib)


@pytest.mark.parametrize(
    ("declared", "history", "keep"),
    [
        (None, (), False),  # nothing known: the floor, not the catalogue's GPUMemNet figure
        (12000, (), False),  # the trace's declared column
        (None, (9000, 9100), False),  # learned peaks
        (8000, (9500, 9600), False),  # a declaration its runs outgrew
        (8000, (9500, 9600), True),  # ... kept (memory_policy='declared')
        (8000, (7000, 7100), False),  # a declaration the runs stay within
    ],
)
def test_the_default_estimate_is_the_executors(
    settings: CarmaSettings, declared: int | None, history: tuple[int, ...], keep: bool
) -> None:
    executor = make_estimator(_option("estimator"), settings.floor_mib)
    simulator = make_estimator(SimConfig(gpus=GPUS).estimator, SimConfig(gpus=GPUS).settings.floor_mib)
    for task in TASKS:
        # the executor knows what the author declared and what it learned, nothing of the catalogue
        knows = TaskMemoryInfo(declared_mib=declared, history_mib=history, keep_declared=keep)
        sees = replace(task.memory_info(declared, history), keep_declared=keep)
        assert simulator.estimate(sees) == executor.estimate(knows), task.name


def _ti(n: int, task: TaskType) -> SimpleNamespace:
    key = SimpleNamespace(dag_id="dag", task_id=task.name, run_id=f"r{n}", try_number=1, map_index=-1)
    return SimpleNamespace(
        dag_id="dag", task_id=task.name, run_id=f"r{n}", map_index=-1, try_number=1, key=key, priority_weight=1
    )


def test_fed_the_same_tries_the_simulator_decides_what_the_executor_decides(settings: CarmaSettings) -> None:
    """The same 16 tries (some declared, some learned, some known to neither) on the same four idle
    GPUs: the executor's requests (intake.first_request with its learned peaks) through a cycle of
    its parts, the simulator's (its own request builder with the same peaks) through its cycle."""
    arrivals = [Arrival(i, 0.0, TASKS[i % len(TASKS)], declared_mib=12000 if i % 3 == 0 else None) for i in range(16)]
    learned_peaks = {"resnet": (9000, 9100), "pair": (7000,)}
    # the executor
    placer, queue, estimator = placement_parts(settings)
    cycle = SchedulingCycle(placer, queue, recovery=recovery_settings(settings, None))
    learned = Learned()
    for name, peaks in learned_peaks.items():
        for peak in peaks:
            learned.add_peak("dag", name, -1, peak)
    # the simulator
    sim = Simulation(SimConfig(gpus=GPUS))
    for name, peaks in learned_peaks.items():
        for peak in peaks:
            sim.peaks.add(name, peak)
    kept = sim.kept_margin_mib
    assert kept == FenceModel.of(
        resolve(
            IsolationMode.parse(settings.isolation), host_profile("framework"), CapRule(settings.isolation_cap)
        ).mode,
        CapRule(settings.isolation_cap),
    ).kept_margin_mib(settings.isolation_margin_mib)
    for a in arrivals:
        config = GpuTaskConfig(gpus=a.task.gpus, memory=a.declared_mib)
        ours = first_request(_ti(a.job_id, a.task), config, estimator, learned, 0.0, kept_margin_mib=kept)
        theirs = sim._request(a)
        assert (ours.memory, ours.gpus, ours.exclusive, ours.kept_margin_mib) == (
            theirs.memory,
            theirs.gpus,
            theirs.exclusive,
            theirs.kept_margin_mib,
        ), a
        key = f"job{a.job_id}"
        cycle.submit(replace(ours, key=key, label=key, priority=0), 0.0)
        sim.cycle.submit(replace(theirs, key=key, label=key), 0.0)
    states = sim.board.states(0.0)  # the four idle GPUs, as the monitor shows them to both
    ours_placed = {p.request.key: p.decision.gpu_uuids for p in cycle.run(0.0, states).placed}
    theirs_placed = {p.request.key: p.decision.gpu_uuids for p in sim.cycle.run(0.0, states).placed}
    assert ours_placed and ours_placed == theirs_placed


def test_a_learned_estimate_is_capped_at_the_largest_gpu_alike(settings: CarmaSettings) -> None:
    """The executor's estimator (built with what its largest GPU offers an idle try) and the
    simulator's cut a learned margin at the same number (issue 41: day two on 4xL4 lost tasks)."""
    l4 = tuple(parse_gpu_list("4xL4"))
    largest = max(g.memory_mib for g in l4) - settings.reserve_mib
    _, _, executor_estimator = placement_parts(settings, largest)
    sim = Simulation(SimConfig(gpus=l4))
    info = TaskMemoryInfo(history_mib=(21_000,))
    ours, theirs = executor_estimator.estimate(info), sim.estimator.estimate(info)
    assert ours is not None and theirs is not None
    assert ours.mib == theirs.mib == largest


def test_a_try_never_alone_teaches_its_shared_reading_on_both_sides() -> None:
    """The executor's telemetry keeps a try's reading beside its co-tenants where it was never
    alone (marked shared); the simulator does by default too (round 48; before, such a type learned
    nothing there, and a fit's stretches waited for it)."""
    from carma_airflow.core.gpu import Tenant
    from carma_airflow.executor.learning import Attribution
    from carma_airflow.monitor.base import GpuSample, ProcessUsage

    class _Handle:
        pid = 100

    attempt = SimpleNamespace(rkey="a", handle=_Handle(), gpu_uuids=("G0",))
    other = Tenant("b", "dag.b", 1000, 0.0)
    seen = Attribution(session={101: 100}.get)
    for i in range(6):
        procs = (ProcessUsage(101, 500, sm_util=0.28),)
        sample = GpuSample("G0", 0, "A100-40GB", "h", 40960, 1000, 39960, float(i), smact=0.9, processes=procs)
        seen.observe({"G0": sample}, [attempt], lambda u: [other])  # type: ignore[list-item]
    got = seen.conclude("a")
    assert got.activity is not None and got.activity.shared and not got.alone
    assert SimConfig(gpus=GPUS).shared_readings  # the simulator's default: the same lesson
