"""The bench's oracle: the completion-time rule fed the simulator's truth instead of the learned model.

:class:`TruthForecast` implements the forecast protocol of
:mod:`carma_airflow.core.policies.forecast` from a running :class:`~carma_airflow.sim.Simulation`:
each tenant's true work left (the simulated run's solo seconds to go), its true demand (the
catalogue profile times the truth's activity scale), the newcomer's true solo run time, and speeds
from the simulator's truth (:mod:`carma_airflow.sim.truth`: the sharing model, drawn per-type
terms or a measured pair table).  :func:`oracle_simulation` is a simulation whose placer runs
the completion-time policy on it.  Same rule, same filters (memory, tenant cap, fences), same
queue: what the default's rule would gain if its predictions were exact, without knowledge of
future arrivals.

:data:`VARIANTS` are the oracles ``bench/robustness.py`` takes the best of, per cell
(:class:`Variant`): this rule with other knobs (the greedy every-GPU-set-or-wait rule: no queue
weight, no rank, every feasible candidate priced) and the predictive policy fed the truth
(:class:`TruthPredictive` on :class:`TruthFit`: true speeds, always sure; with or without the
paper's risk rule, several ``min_gain`` and tenant caps).  None sees a try before it is submitted.

    .venv/bin/python bench/oracle.py [--trace t1] [--beta 0.5] [--scale 1.0] [--truth sharing] [--explain N]

``--explain N`` also prints the first N decisions of the learned rule's run that priced two
options or more, waiting among them, in seconds (once run times are known), and the first try
that waited though it could share a GPU, as ``carma why`` shows them: the worked example of
docs/placement.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import GpuState, parse_gpu_list
from carma_airflow.core.cycle import CycleResult
from carma_airflow.core.interference import SpeedPrediction
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.policies.completion_time import DEFAULT_COMPLETION_SETTINGS, CompletionTime
from carma_airflow.core.policies.forecast import Occupant, task_type
from carma_airflow.core.policies.predictive import Predictive, PredictiveSettings
from carma_airflow.core.sharing import ActivityProfile, SharingModel
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim import SimConfig, Simulation, load_catalog, load_trace, packaged
from carma_airflow.sim.gpus import scaled
from carma_airflow.sim.workload import Arrival

ORACLE = "completion-time"


class TruthForecast:
    """The forecast protocol answered from the simulation's truth (see the module doc)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._memo: dict[tuple[object, ...], tuple[float, ...]] = {}

    def timed(self) -> bool:
        return True

    def _profile(self, arrival: Arrival) -> ActivityProfile:
        scale = self.sim.cfg.activity_scale
        p = arrival.task.profile
        return p if scale == 1.0 else scaled(p, scale)

    def _arrival(self, job_id: int) -> Arrival:
        return self.sim.jobs[job_id].arrival

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        g = self.sim.by_uuid[facts.uuid]
        out = [
            Occupant(
                r.arrival.task.name, r.profile.sm_activity, max(0.0, r.remaining - r.rate * (now - r.last)), r.profile
            )
            for r in g.runs
        ]
        for label in facts.joined or ():
            job = int(label.rsplit("[", 1)[1].rstrip("]"))
            a = self._arrival(job)
            prof = self._profile(a)
            out.append(Occupant(a.task.name, prof.sm_activity, a.task.solo_s, prof))
        return out

    def newcomer(self, request: TaskRequest) -> Occupant:
        a = self._arrival(int(request.key[3:].split("#", 1)[0]))
        prof = self._profile(a)
        assert a.task.name == task_type(request.label)
        return Occupant(a.task.name, prof.sm_activity, a.task.solo_s, prof)

    def run_alone(self, request: TaskRequest) -> float:
        return self._arrival(int(request.key[3:].split("#", 1)[0])).task.solo_s

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        key = tuple((o.kind, o.activity) for o in occupants)
        got = self._memo.get(key)
        if got is None:
            profiles = [o.ref for o in occupants]
            assert all(isinstance(p, ActivityProfile) for p in profiles)
            slow = self.sim.board.truth.slowdowns(profiles, [o.kind for o in occupants])  # type: ignore[arg-type]
            got = self._memo[key] = tuple(1.0 / max(1e-9, s) for s in slow)
        return got


@dataclass(frozen=True, slots=True)
class Variant:
    """One oracle: a rule fed the truth and its knobs.  ``rule``: ``completion-time`` (this
    project's rule on :class:`TruthForecast`; ``queue``, ``shortest_first``, ``candidates``,
    ``max_tenants``, ``risk_rule`` as in ``CompletionSettings``; ``queue`` 0, no rank and every
    feasible candidate priced is the greedy every-option-plus-wait rule of issue 23) or
    ``predictive`` (the predictive policy on :class:`TruthFit`: true speeds, sure everywhere;
    ``min_gain``, ``max_tenants``, ``risk_rule``: the paper's risk rule kept, else a busy GPU
    is refused only where the collocation does not pay)."""

    rule: str = "completion-time"
    queue: float = 0.35
    shortest_first: bool = True
    candidates: int = 4
    max_tenants: int = 3
    risk_rule: bool = False
    min_gain: float = 0.25
    max_slowdown: float = 2.5
    overdue_runs: float = 0.5
    # completion-time's floor on a collocation's gain in summed speed (CompletionSettings.min_gain):
    # the default's unless a variant says otherwise (None: no floor)
    collocation_gain: float | None = DEFAULT_COMPLETION_SETTINGS.min_gain
    # completion-time's floor once a GPU model's interference is known (CompletionSettings.learned_floor;
    # the truth knows every model): the default's unless a variant says otherwise (None: none)
    learned_floor: float | None = DEFAULT_COMPLETION_SETTINGS.learned_floor


# The oracles the bench takes the best of, per cell (issue 23: "the best oracle found without
# knowledge of future arrivals").  None of them sees an arrival before it is submitted.
VARIANTS: dict[str, Variant] = {
    "ct": Variant(),  # the default's rule and knobs, on the truth
    "ct-fifo": Variant(shortest_first=False),
    "ct-g0.1": Variant(collocation_gain=0.1),  # the truth needs a lower floor than a learned model
    "ct-nogain": Variant(collocation_gain=None, learned_floor=None),
    # every GPU set and waiting, no floor
    "greedy": Variant(queue=0.0, shortest_first=False, candidates=64, learned_floor=None),
    "greedy-rank": Variant(queue=0.0, candidates=64, learned_floor=None),
    "ct-q1": Variant(queue=1.0, candidates=64),
    "pred": Variant("predictive"),
    "pred-risk": Variant("predictive", risk_rule=True),
    "pred-g0.1": Variant("predictive", min_gain=0.1),
    "pred-g0.5": Variant("predictive", min_gain=0.5),
    "pred-cap2": Variant("predictive", max_tenants=2),
    "pred-cap4": Variant("predictive", max_tenants=4),
    "pred-g0.1-cap4": Variant("predictive", min_gain=0.1, max_tenants=4),
}
# what bench/robustness.py takes the best of by default: the variants that won a cell of its grid
# (2026-12, the others never did, or by under 0.01) and the default's rule itself
DEFAULT_VARIANTS = ("ct", "ct-g0.1", "greedy", "pred", "pred-cap4", "pred-g0.1", "pred-g0.1-cap4", "pred-g0.5")


class TruthFit:
    """An interference fit that answers with the simulator's true speeds (for :class:`TruthPredictive`):
    the task types' true profiles and the truth's slowdowns; the activities it is given are ignored."""

    learned = True

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._profiles: dict[str, ActivityProfile] = {}
        self._memo: dict[tuple[str, tuple[str, ...]], SpeedPrediction] = {}

    def _profile(self, kind: str) -> ActivityProfile:
        got = self._profiles.get(kind)
        if got is None:
            scale = self.sim.cfg.activity_scale
            for job in self.sim.jobs.values():
                task = job.arrival.task
                self._profiles.setdefault(task.name, task.profile if scale == 1.0 else scaled(task.profile, scale))
            got = self._profiles[kind]
        return got

    def predict(
        self, own: float, co_tenants: Sequence[float], task: str | None = None, co_tasks: Sequence[str | None] = ()
    ) -> SpeedPrediction:
        assert task is not None and all(t is not None for t in co_tasks)
        key = (task, tuple(sorted(str(t) for t in co_tasks)))
        got = self._memo.get(key)
        if got is None:
            kinds = [task, *key[1]]
            slow = self.sim.board.truth.slowdowns([self._profile(k) for k in kinds], kinds)[0]
            speed = 1.0 / max(1e-9, slow)
            got = self._memo[key] = SpeedPrediction(speed, speed, speed, 1.0)
        return got


class TruthPredictive(Predictive):
    """The predictive policy fed the truth: true speeds (:class:`TruthFit`), always sure."""

    def __init__(self, sim: Simulation, settings: PredictiveSettings) -> None:
        super().__init__(settings=settings)
        self.truth_fit = TruthFit(sim)

    def _fit(self, spec_name: str) -> TruthFit:  # type: ignore[override]
        return self.truth_fit

    def _sure(self, newcomer: object, fit: object) -> bool:
        return True

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        if not request.label:  # the pools' placeholder request (no task): the fallback order
            return self._fallback_key(facts)
        typed = [(task_type(label), a.sm_activity) for label, a in self._tenant_activities(facts)]
        fit = self.truth_fit
        before, _, after_low, mine = self._rates(fit, typed, 0.0, task_type(request.label))  # type: ignore[arg-type]
        gain_low = after_low - before
        band = -float(int(gain_low // self.settings.gain_step))
        pays = self._pays(bool(typed), gain_low, mine)
        return (0.0 if pays else 1.0, band, -float(facts.usable_free_mib), float(facts.index))


def oracle_simulation(config: SimConfig, variant: Variant | str = "ct") -> Simulation:
    """A simulation whose placer runs ``variant`` (a :class:`Variant` or a name of :data:`VARIANTS`;
    the default: the completion-time rule with its own knobs) on the truth."""
    v = VARIANTS[variant] if isinstance(variant, str) else variant
    if v.rule == "predictive":
        settings = PredictiveSettings(
            min_gain=v.min_gain, max_slowdown=v.max_slowdown, max_tenants=v.max_tenants, override_risk=not v.risk_rule
        )
        sim = Simulation(replace(config, policy="predictive", predictive=settings))
        pol = TruthPredictive(sim, settings)
        sim.placer.policy = pol
        sim.predictive = pol
        return sim
    if v.rule != ORACLE:
        raise ValueError(f"unknown oracle rule {v.rule!r}")
    sim = Simulation(replace(config, policy=ORACLE))
    policy = sim.placer.policy
    assert isinstance(policy, CompletionTime)
    policy.settings = replace(
        policy.settings,
        queue=v.queue,
        shortest_first=v.shortest_first,
        candidates=v.candidates,
        max_tenants=v.max_tenants,
        risk_rule=v.risk_rule,
        overdue_runs=v.overdue_runs,
        min_gain=v.collocation_gain,
        learned_floor=v.learned_floor,
    )
    policy.max_tenants = v.max_tenants
    policy.checks_risk = v.risk_rule
    policy.forecast = TruthForecast(sim)
    return sim


def explained(sim: Simulation, arrivals: list[Arrival], count: int) -> list[str]:
    """Run ``sim`` with every waiting decision explained; the first ``count`` decisions that
    priced two options or more, waiting among them, in seconds, and the first try that waited
    though it could share a GPU, as text with the time of the pass."""
    out: list[str] = []
    waited: list[str] = []  # the first try that could share a GPU but waited
    run = sim.cycle.run

    def explaining(now: float, gpus: Sequence[GpuState], *, waiting_decisions: bool = True) -> CycleResult:
        result = run(now, gpus, waiting_decisions=True)
        decisions = [p.decision for p in result.placed] + list({id(d): d for d in result.waiting.values()}.values())
        for d in decisions:
            priced = [v for v in (*d.chosen, *d.rejected) if "cost " in v.detail]
            if len(priced) < 2 or "waiting" not in d.explain() or " runs" in d.summary:
                continue
            text = f"t = {now:.0f} s, {d.request_key}:\n{d.explain()}"
            if d.summary.startswith("waiting: sharing") and not waited:
                waited.append(text)
            elif len(out) < count:
                out.append(text)
        return result

    sim.cycle.run = explaining  # type: ignore[method-assign]
    sim.run(list(arrivals))
    return out + waited


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="t1", help="t1 or t2 (the paper's traces)")
    ap.add_argument("--beta", type=float, default=0.5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--truth", default="sharing")
    ap.add_argument("--explain", type=int, default=0, help="print the learned rule's first N priced decisions")
    args = ap.parse_args(argv)
    catalog = load_catalog(packaged("task_catalog.csv"))
    arrivals = load_trace(packaged(f"trace_{args.trace}.csv"), catalog)
    cfg = SimConfig(gpus=tuple(parse_gpu_list("4xA100-40GB")), estimator="history+gpumemnet", queue="backfill")
    cfg = replace(cfg, sharing=SharingModel(beta=args.beta), activity_scale=args.scale, truth=args.truth)
    rows = []
    for name, sim in (
        ("most-free-memory", Simulation(replace(cfg, policy="most-free-memory"))),
        ("completion-time (learned)", Simulation(replace(cfg, policy="completion-time"))),
        ("completion-time (oracle)", oracle_simulation(cfg)),
    ):
        r = sim.run(list(arrivals))
        done = [t for t in r.tasks if t.outcome == "success" and t.end_s is not None]
        jct = statistics.fmean(t.end_s - t.submit_s for t in done)  # type: ignore[operator]
        rows.append((name, jct, r.makespan_s, len(r.tasks) - len(done)))
    base = rows[0]
    print(f"trace {args.trace}, beta {args.beta}, activity scale {args.scale}, truth {args.truth}; ratios to {base[0]}")
    for name, jct, mk, lost in rows:
        print(
            f"  {name:<28} mean JCT {jct:8.0f} s ({jct / base[1]:.3f})"
            f"  makespan {mk:8.0f} s ({mk / base[2]:.3f})  lost {lost}"
        )
    if args.explain > 0:
        print(f"\nthe learned rule's first {args.explain} decisions that priced two options or more:")
        for text in explained(Simulation(replace(cfg, policy="completion-time")), arrivals, args.explain):
            print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
