"""What an ended try teaches (executor/learning/learning.py, telemetry.py): its observation of interference
names its co-tenants' task types, so their pressure is fitted (issue 23), and its learned
activity is stored with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from executor_helpers import make_workload, run_until, running_try, submit

from carma_airflow.core.activity import ActivitySample
from carma_airflow.core.interference import CollocationObservation, InterferenceModel, Segment
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.executor.bookkeeping import AddActivity, SaveDocument
from carma_airflow.executor.learning import Seen, learn_from_success
from carma_airflow.executor.learning.learned import HANDOVER_S, MODEL_DOC, SOLO_KEPT, Learned, use_durations
from carma_airflow.store.store import Store


def _learned_with_baselines() -> Learned:
    learned = Learned()
    for task, act in (("victim", 0.4), ("light", 0.2), ("heavy", 0.7)):
        learned.add_activity("dag", task, ActivitySample(act, "process"))
        learned.add_solo("dag", task, 100.0)
    return learned


def test_an_observation_names_its_co_tenants_types_and_the_activity_row_keeps_them() -> None:
    learned = _learned_with_baselines()
    seen = Seen(
        ActivitySample(0.41, "process"),
        False,
        (Segment(0.5, ()), Segment(0.5, (0.7,), ("dag.heavy",))),
        ("dag.heavy",),
    )
    writes = learn_from_success(learned, running_try("victim", 0.0), seen, 150.0, "A100-40GB")
    activity = next(w for w in writes if isinstance(w, AddActivity))
    assert activity.co_tasks == ("dag.heavy",) and activity.sm_activity == 0.41
    document = next(w for w in writes if isinstance(w, SaveDocument))
    assert document.document == MODEL_DOC
    (obs,) = learned.model.fit_for("A100-40GB").observations
    assert obs.task == "dag.victim" and obs.stretch == 1.5
    assert [s.co_tasks for s in obs.segments] == [(), ("dag.heavy",)]
    # persisted with the types: a restarted executor fits the same pressure terms
    again = InterferenceModel.from_dict(document.body)
    assert again.fit_for("A100-40GB").observations[0].segments[1].co_tasks == ("dag.heavy",)


def test_pressure_is_learned_from_the_co_tenants_types_the_executor_records() -> None:
    # one victim type beside a heavy and a light co-tenant of the *same* reported activity: only
    # the co-tenants' types tell them apart, and the fit learns that the heavy one hurts more
    learned = _learned_with_baselines()
    for i in range(40):
        heavy = i % 2 == 0
        stretch = (1.9 if heavy else 1.15) * (1.0 + 0.01 * ((i * 7) % 5 - 2))
        partner = "dag.heavy" if heavy else "dag.light"
        seen = Seen(ActivitySample(0.4, "process"), False, (Segment(1.0, (0.5,), (partner,)),), (partner,))
        learn_from_success(learned, running_try("victim", 0.0), seen, 100.0 * stretch, "A100-40GB")
    fit = learned.model.fit_for("A100-40GB")
    assert fit.learned
    terms = fit.task_terms()
    assert terms["dag.heavy"]["pressure"] > 1.2 and terms["dag.light"]["pressure"] < 0.8
    beside_heavy = fit.predict(0.4, (0.5,), "dag.victim", ("dag.heavy",)).speed
    beside_light = fit.predict(0.4, (0.5,), "dag.victim", ("dag.light",)).speed
    assert abs(beside_heavy - 1 / 1.9) < 0.05 and abs(beside_light - 1 / 1.15) < 0.05
    # what the executor recorded before issue 23 (no co-tenant types) cannot tell them apart
    blind = InterferenceModel()
    for obs in fit.observations:
        anonymous = tuple(Segment(s.share, s.co_tenants) for s in obs.segments)
        blind = blind.observe("A100-40GB", CollocationObservation(obs.stretch, obs.own_activity, anonymous, obs.task))
    b = blind.fit_for("A100-40GB")
    assert b.predict(0.4, (0.5,), "dag.victim", ("dag.heavy",)).speed == b.predict(0.4, (0.5,), "dag.victim").speed


def test_the_executor_records_whom_a_try_shared_its_gpu_with(executor_factory: Any) -> None:
    # a real executor on one simulated A100: the victim runs alone (its baseline), then beside a
    # heavy try; its interference observation and its activity row name the heavy one's type
    victim = {"peak_mib": 2000, "seconds": 1.5, "activity": 0.3, "ramp_s": 0.1}
    heavy = {"peak_mib": 2000, "seconds": 3.0, "activity": 0.8, "ramp_s": 0.1}
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"victim": {"train": victim}, "heavy": {"train": heavy}})
    submit(ex, make_workload("victim", config={"memory": "3GiB"}, run_id="alone"))
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)
    submit(
        ex,
        make_workload("heavy", config={"memory": "3GiB"}, run_id="shared"),
        make_workload("victim", config={"memory": "3GiB"}, run_id="shared"),
    )
    assert len(ex.active) == 2  # both on the one GPU
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=40)
    store = ex.flow.store
    rows = store.activity_records("dag", "victim")
    assert [r.run_id for r in rows] == ["alone", "shared"]
    assert rows[0].co_tasks == () and rows[1].co_tasks == ("dag.heavy",)
    assert store.activity_records("dag", "heavy")[-1].co_tasks == ("dag.victim",)
    # the trainings reported their progress where the executor said; each file went with its try
    assert not list((Path(ex.flow.starter.settings.state_dir) / "results").glob("*.progress"))
    fit = ex.flow.learned.model.fit_for("A100-40GB")
    (obs,) = [o for o in fit.observations if o.task == "dag.victim"]
    assert obs.stretch > 1.0
    assert {name for s in obs.segments for name in s.co_tasks} == {"dag.heavy"}
    _, body = store.snapshots(MODEL_DOC)[MODEL_DOC]
    persisted = InterferenceModel.from_dict(body).fit_for("A100-40GB").observations
    assert [s.co_tasks for o in persisted if o.task == "dag.victim" for s in o.segments if s.co_tenants] == [
        ("dag.heavy",)
    ]


def test_what_an_ended_try_taught_reaches_the_policy_at_a_pass_once_the_hand_over_is_due(
    executor_factory: Any,
) -> None:
    # a solo run time is learned when the try ends, but the policy gets it only at the first pass
    # HANDOVER_S after the last hand-over (at start): each hand-over costs a pass every GPU's
    # predictions afresh
    solo = {"peak_mib": 2000, "seconds": 1.2, "activity": 0.3, "ramp_s": 0.1}
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"solo": {"train": solo}})
    policy = ex.flow.placer.policy
    assert isinstance(policy, CompletionTime)
    submit(ex, make_workload("solo", config={"memory": "3GiB"}, run_id="first"))
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)
    assert ex.flow.learned.solo_seconds("dag", "solo") is not None  # learned at the end
    submit(ex, make_workload("solo", config={"memory": "3GiB"}, run_id="second"))  # a pass, not due yet
    assert policy.learned.durations.expected("dag.solo") is None
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)
    handed = ex.flow.learned._handed
    ex.flow.learned._handed = (handed[0], handed[1] - HANDOVER_S)  # as if the last was 30 s ago
    submit(ex, make_workload("solo", config={"memory": "3GiB"}, run_id="third"))  # this pass hands over
    assert policy.learned.durations.expected("dag.solo") is not None
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)


def test_a_try_that_ran_alone_keeps_its_run_time_with_its_activity_and_a_shared_one_does_not() -> None:
    learned = _learned_with_baselines()
    alone = Seen(ActivitySample(0.4, "process"), True, (Segment(1.0, ()),), ())
    writes = learn_from_success(learned, running_try("victim", 0.0), alone, 120.0, "A100-40GB")
    (activity,) = [w for w in writes if isinstance(w, AddActivity)]
    assert activity.solo_s == 120.0 and activity.co_tasks == ()
    assert learned.solo_seconds("dag", "victim") == 110.0  # the median of 100 (before) and 120
    shared = Seen(ActivitySample(0.4, "process"), False, (Segment(1.0, (0.7,), ("dag.heavy",)),), ("dag.heavy",))
    writes = learn_from_success(learned, running_try("victim", 0.0), shared, 150.0, "A100-40GB")
    assert [w.solo_s for w in writes if isinstance(w, AddActivity)] == [None]
    brief = learn_from_success(learned, running_try("light", 10.0), alone, 10.5, "A100-40GB")  # too short to tell
    assert [w.solo_s for w in brief if isinstance(w, AddActivity)] == [None]


def test_a_restarted_executor_prices_with_the_run_times_its_tasks_had(executor_factory: Any) -> None:
    # before revision 0009 a restart forgot every solo run time: the completion-time policy priced
    # nothing by time until each task had run alone again
    solo = {"peak_mib": 2000, "seconds": 1.2, "activity": 0.3, "ramp_s": 0.1}
    first = executor_factory(gpus="1xA100-40GB", behaviour={"solo": {"train": solo}})
    submit(first, make_workload("solo", config={"memory": "3GiB"}, run_id="first"))
    run_until(first, lambda: not first.active and not first.waiting, timeout=30)
    ran = first.flow.learned.solo_seconds("dag", "solo")
    assert ran is not None and ran >= 1.0
    first.end()  # SQLite: one executor places at a time
    again = executor_factory(gpus="1xA100-40GB", behaviour={"solo": {"train": solo}})
    policy = again.flow.placer.policy
    assert isinstance(policy, CompletionTime)
    assert again.flow.learned.solo_seconds("dag", "solo") == ran
    assert policy.learned.durations.expected("dag.solo") == ran  # handed over at the start


def test_a_start_hands_the_policy_only_the_run_times_each_task_keeps(tmp_path: Path) -> None:
    # a long-lived store holds every solo run a task had; the executor keeps the latest SOLO_KEPT
    # and hands the policy those (each one costs the policy a median over the task types)
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    for i in range(SOLO_KEPT + 5):
        store.add_activity("dag", "t", 0.3, "process", 1_900_000_000.0 + i, co_tasks=[], solo_s=100.0 + i)
    store.add_activity("dag", "u", 0.3, "process", 1_900_000_100.0, co_tasks=[], solo_s=40.0)
    learned = Learned()
    learned.load(store)
    store.close()
    handed = learned.take_new_solos()
    assert sorted(s for k, s, _ in handed if k == "dag.t") == [100.0 + i for i in range(5, SOLO_KEPT + 5)]
    assert [s for k, s, _ in handed if k == "dag.u"] == [40.0]
    assert {m for _, _, m in handed} == {None}  # no GPU model stored: none handed
    assert learned.solo_seconds("dag", "t") == 100.0 + (5 + SOLO_KEPT + 4) / 2


def test_a_start_hands_the_policy_each_solo_run_with_its_gpu_model(tmp_path: Path) -> None:
    # issue 44: a restarted executor prices each GPU model on what the earlier one measured there,
    # so the solo runs it reads back go to the policy with the model they ran on
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    for i, (model, seconds) in enumerate([("A100-80GB", 30.0), ("V100-32GB", 120.0), ("A100-80GB", 32.0)]):
        store.add_activity(
            "dag", "gains", 0.5, "process", 1_900_000_000.0 + i, co_tasks=[], solo_s=seconds, gpu_model=model
        )
    learned = Learned()
    learned.load(store)
    store.close()
    policy = CompletionTime()
    use_durations(policy, learned)
    fast = policy.learned.by_model.predict("dag.gains", "A100-80GB")
    slow = policy.learned.by_model.predict("dag.gains", "V100-32GB")
    assert fast is not None and slow is not None
    assert fast.seconds == pytest.approx(31.0, rel=0.05)
    assert slow.seconds == pytest.approx(120.0, rel=0.05)
    assert learned.take_new_solos() == []  # handed once


def test_a_whole_try_on_a_mixed_fleet_is_timed_against_its_runs_alone_on_the_same_model() -> None:
    # the victim ran alone on an H100 in 100 s and on an L4 in 400 s; a try that shared an L4 for
    # 600 s ran 1.5x slower than alone there, not 6x (its H100 runs are another model's pace)
    learned = _learned_with_baselines()
    learned.add_solo("dag", "victim", 100.0, "H100-80GB")
    learned.add_solo("dag", "victim", 400.0, "L4")
    seen = Seen(ActivitySample(0.41, "process"), False, (Segment(1.0, (0.7,), ("dag.heavy",)),), ("dag.heavy",))
    learn_from_success(learned, running_try("victim", 0.0), seen, 600.0, "L4")
    (obs,) = learned.model.fit_for("L4").observations
    assert obs.stretch == 1.5


def test_a_whole_try_on_a_model_its_task_never_ran_alone_on_teaches_no_stretch() -> None:
    learned = Learned()
    learned.add_activity("dag", "victim", ActivitySample(0.4, "process"))
    learned.add_solo("dag", "victim", 100.0, "H100-80GB")  # alone only on the H100
    seen = Seen(ActivitySample(0.41, "process"), False, (Segment(1.0, (0.7,), ("dag.heavy",)),), ("dag.heavy",))
    learn_from_success(learned, running_try("victim", 0.0), seen, 600.0, "L4")
    assert not learned.model.fit_for("L4").observations  # no baseline there: nothing of interference
    learn_from_success(learned, running_try("victim", 0.0), seen, 150.0, "H100-80GB")
    assert [o.stretch for o in learned.model.fit_for("H100-80GB").observations] == [1.5]  # there it has one
