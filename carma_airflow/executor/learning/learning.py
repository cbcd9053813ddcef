"""What an ended try teaches (issue 13): the task's activity, its solo run time, and, for a try
that shared its GPUs, one observation of interference for its GPU model, naming its own task
type and its co-tenants' (issue 23: their pressure is learned).  No I/O: the store writes are
returned."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.interference import CollocationObservation
from carma_airflow.core.policies.durations import alone_from_shared
from carma_airflow.executor.bookkeeping import AddActivity, SaveDocument, StoreWrite, utc
from carma_airflow.executor.learning.learned import MODEL_DOC, EndedTry, Learned
from carma_airflow.executor.learning.telemetry import Attribution, Seen
from carma_airflow.executor.tries import Try, TryEnd, family_of
from carma_airflow.store.records import TryOutcome

MIN_RUN_S = 1.0  # a try shorter than this says nothing about its speed
LIVE_SAMPLES = 5  # monitor samples of a running try before its activity is used (issue 13)


def tell_while_running(
    cycle: SchedulingCycle, learned: Learned, telemetry: Attribution, running: Iterable[Try], waiting: Iterable[Try]
) -> int:
    """Use what the monitor measured of a running try's own SM activity at once, not only when
    it ends: it counts with it as a co-tenant, and the waiting tries of the same task are decided
    with it from the next pass (their own history plus this try so far).  Once per try; returns
    how many tries were told.  Before, a never-seen task counted with the prior (0.5) until its
    first try ended, however light or heavy the monitor already showed it to be."""
    told = 0
    same_task: dict[tuple[str, str], list[Try]] | None = None
    for attempt in running:
        if attempt.activity_told:
            continue
        sample = telemetry.so_far(attempt.rkey, LIVE_SAMPLES)
        if sample is None:
            continue
        attempt.activity_told = True
        ti = attempt.ti
        hint = attempt.config.activity if attempt.config is not None else None
        estimate = learned.activity_with(ti.dag_id, ti.task_id, sample, hint)
        cycle.learn_activity(attempt.rkey, estimate)
        if same_task is None:
            same_task = {}
            for w in waiting:
                same_task.setdefault((w.ti.dag_id, w.ti.task_id), []).append(w)
        for w in same_task.get((ti.dag_id, ti.task_id), ()):
            # only a try that knows nothing yet: one that came in with its task's history keeps
            # it (re-deciding a deep queue at every try that runs would churn the placer's groups)
            if w.request is not None and (w.request.activity is None or w.request.activity.count == 0):
                w.request = replace(w.request, activity=estimate)
                cycle.learn_activity(w.rkey, estimate)
        told += 1
    return told


def remember_end(
    learned: Learned,
    attempt: Try,
    end: TryEnd,
    seen: Seen,
    now: float,
    gpu_model: str | None,
    slowdown: float | None = None,
) -> list[StoreWrite]:
    """Keep what any ended try teaches; the store writes of the lessons that persist."""
    ti = attempt.ti
    estimate = attempt.request.memory.mib if attempt.request else 0
    peak = end.result.peak_mib
    learned.add_try(family_of(ti), EndedTry(ti.try_number, end.outcome.value, peak, estimate, attempt.gpu_uuids))
    if end.outcome is not TryOutcome.SUCCESS:
        return []
    if peak:
        learned.add_peak(ti.dag_id, ti.task_id, ti.map_index, peak)
    return learn_from_success(learned, attempt, seen, now, gpu_model, slowdown)


def learn_from_success(
    learned: Learned, attempt: Try, seen: Seen, now: float, gpu_model: str | None, slowdown: float | None = None
) -> list[StoreWrite]:
    """``slowdown``: the one the policy predicted when it priced the try to share (None: none)."""
    ti = attempt.ti
    writes: list[StoreWrite] = []
    run_s = now - attempt.started_at
    timed = run_s >= MIN_RUN_S and bool(seen.segments)
    solo_s = run_s if timed and seen.alone else None  # a solo run time: kept with the activity
    if solo_s is None and timed and seen.slowed_s is not None:
        solo_s = max(MIN_RUN_S, run_s - seen.slowed_s)  # its progress reports: its run less what co-tenants cost
    # a first try shared all along (no earlier try left a checkpoint to resume): its whole work's run
    # time bounds its task's run alone (core/policies/durations.py), kept with the activity too
    shared_s = run_s if timed and not seen.alone and solo_s is None and ti.try_number <= 1 else None
    shared_alone_s = alone_from_shared(shared_s, slowdown) if shared_s is not None else None  # and estimates it
    if seen.activity is not None:
        learned.add_activity(ti.dag_id, ti.task_id, seen.activity)
        writes.append(
            AddActivity(
                ti.dag_id,
                ti.task_id,
                seen.activity.sm_activity,
                seen.activity.source,
                utc(now),
                ti.run_id,
                ti.map_index,
                seen.co_tasks,
                solo_s,
                gpu_model if solo_s is not None or shared_s is not None else None,
                shared_s,
                shared_alone_s,
            )
        )
    if not timed:
        return writes
    if solo_s is not None:
        learned.add_solo(ti.dag_id, ti.task_id, solo_s, gpu_model)
    if seen.stretches and gpu_model is not None:  # its own progress: interference seen within the try
        return writes + _observe_stretches(learned, attempt, seen, now, gpu_model)
    if seen.alone:  # alone throughout: nothing of interference to learn
        return writes
    if shared_s is not None:
        learned.add_bound(ti.dag_id, ti.task_id, shared_s, gpu_model, shared_alone_s)
    solo = learned.solo_on(ti.dag_id, ti.task_id, gpu_model) if gpu_model is not None else None
    if solo is None or gpu_model is None:
        return writes  # no baseline yet (on this GPU model): the stretch of this try is not known
    own = learned.activity(ti.dag_id, ti.task_id).sm_activity
    # the task type (its label without the map index) gets its own sensitivity, and the segments
    # name the co-tenants' types (telemetry.py), whose pressure is fitted from it (core/task_terms.py)
    observation = CollocationObservation(run_s / solo, own, seen.segments, f"{ti.dag_id}.{ti.task_id}")
    if not observation.informative:
        return writes
    learned.model = learned.model.observe(gpu_model, observation)
    writes.append(SaveDocument(MODEL_DOC, now, learned.model.to_dict()))
    return writes


def _observe_stretches(learned: Learned, attempt: Try, seen: Seen, now: float, gpu_model: str) -> list[StoreWrite]:
    """One observation per set of co-tenants the try ran beside long enough, its slowdown there
    from its own progress reports (telemetry.py ``ProgressStretch``): no solo run of its task needed."""
    ti = attempt.ti
    own = learned.activity(ti.dag_id, ti.task_id).sm_activity
    task = f"{ti.dag_id}.{ti.task_id}"
    model = learned.model
    for s in seen.stretches:
        obs = CollocationObservation.steady(s.stretch, own, s.co_activities, task=task, co_tasks=s.co_types)
        if obs.informative:
            model = model.observe(gpu_model, obs)
    if model is learned.model:
        return []
    learned.model = model
    return [SaveDocument(MODEL_DOC, now, model.to_dict())]


__all__ = ["learn_from_success", "remember_end"]
