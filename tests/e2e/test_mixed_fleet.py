"""A mixed fleet in a real Airflow: simulated 2xA100-80GB + 2xV100-32GB whose GPUs run each task
at its model's speed (issue 44 items 6, 2, 3 and 4; the DAGs are in ``mixed_fleet_dags/``).

* ``carma_mixed_speed``: ``gains`` runs 4x faster on an A100-80GB, ``flat`` as fast on either
  model.  Its first run measures each alone on both models; the store then holds solo run times
  per task and GPU model and ``carma model`` shows the V100/A100 ratio learned from the two.  The
  scheduler (and its executor) is then killed and started again, and the DAG runs a second time:
  the learning is in the store, the new executor adds to it, and (issue 44 item 4) places
  ``gains``'s small instance on the fast model and says the predicted run on each model.
* ``carma_mixed_scarce``, run twice: small tasks without a ``gpu_model`` leave the 80 GB GPUs to
  the tasks that need them while those wait; none runs three to a card while a V100 holds one.

One deployment for the file (SQLite: the subject is not the store's backend).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from carma_airflow.dev.devstack import AirflowStack
from carma_airflow.monitor.ledger import sim_uuid
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.db]

DAGS = Path(__file__).with_name("mixed_fleet_dags")
FLEET = "2xA100-80GB,2xV100-32GB"
FAST, SLOW = "A100-80GB", "V100-32GB"
MODEL_OF = {sim_uuid(i): FAST if i < 2 else SLOW for i in range(4)}  # the ledger's order: FLEET's
RUN_TIMEOUT_S = 240
WRITTEN_WITHIN_S = 30.0  # the executor writes a try's lessons a heartbeat or two after Airflow sees it end


def _dag_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DAGS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPEED = _dag_module("carma_mixed_speed")
SCARCE = _dag_module("carma_mixed_scarce")


@dataclass
class Fleet:
    stack: AirflowStack
    store: Store

    def run(self, dag_id: str) -> str:
        self.stack.wait_quiet()
        began = time.monotonic()
        run = self.stack.trigger(dag_id)
        assert self.stack.wait_run(dag_id, run, timeout=RUN_TIMEOUT_S) == "success", self.stack.tail("scheduler")
        print(f"{dag_id} {run}: {time.monotonic() - began:.0f} s")
        return run

    def tries(self, dag_id: str, run_id: str, count: int) -> list[PlacementRecord]:
        """The run's ``count`` successful tries once the executor has recorded how each ended."""
        deadline = time.time() + WRITTEN_WITHIN_S
        while True:
            done = [p for p in self.store.placements(dag_id) if p.run_id == run_id and p.outcome == TryOutcome.SUCCESS]
            if len(done) >= count and all(p.started_at and p.ended_at for p in done):
                return done
            if time.time() > deadline:
                raise AssertionError(f"{dag_id} {run_id}: {len(done)} of {count} tries recorded: {done}")
            time.sleep(0.5)

    def solo_runs(self, dag_id: str, at_least: int) -> dict[tuple[str, str], list[float]]:
        """The solo run times the store holds for ``dag_id``'s tasks, by (task, GPU model)."""
        deadline = time.time() + WRITTEN_WITHIN_S
        while True:
            runs: dict[tuple[str, str], list[float]] = {}
            for dag, task_id, model, seconds in self.store.recent_solo_runs_by_model():
                if dag == dag_id:
                    runs.setdefault((task_id, model), []).append(seconds)
            if sum(map(len, runs.values())) >= at_least or time.time() > deadline:
                return runs
            time.sleep(0.5)

    def results(self, dag_id: str, run_id: str, task_id: str) -> dict[int, dict[str, Any]]:
        """What each map index of a mapped task returned (simulated_training's figures)."""
        rows = self.stack.query(
            "select map_index, value from xcom where dag_id = :d and run_id = :r and task_id = :t "
            "and key = 'return_value'",
            d=dag_id,
            r=run_id,
            t=task_id,
        )
        # SQLite keeps JSON text; PostgreSQL's JSONB comes back decoded
        return {int(i): json.loads(v) if isinstance(v, (str, bytes)) else v for i, v in rows}

    def carma(self, *args: str) -> str:
        """A ``carma`` command against the deployment's store, as an operator runs it."""
        carma = Path(sys.executable).with_name("carma")
        out = subprocess.run(
            [str(carma), *args], env=self.stack.env, capture_output=True, text=True, timeout=120, check=False
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    def restart_scheduler(self) -> None:
        """The scheduler and its executor killed and started again: only the store remembers."""
        self.stack.wait_quiet()
        began = time.monotonic()
        self.stack.kill("scheduler")
        self.stack.start_component("scheduler")
        print(f"scheduler killed and started: {time.monotonic() - began:.0f} s")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    home = tmp_path_factory.mktemp("mixed-fleet")
    stack = AirflowStack(home, DAGS, simulated_gpus=FLEET)
    store: Store | None = None
    try:
        began = time.monotonic()
        stack.start()
        print(f"boot: {time.monotonic() - began:.0f} s")
        store = Store(Store.default_url(str(home)))
        yield Fleet(stack, store)
    finally:
        if store is not None:
            store.close()
        stack.stop(grace_s=1.0)  # a teardown: no orderly hand-back needed


@dataclass(frozen=True)
class SpeedRuns:
    first: str
    second: str  # after the restart
    after_first: dict[tuple[str, str], list[float]]
    model_text: str  # `carma model` after the first run


@pytest.fixture(scope="module")
def speed_runs(fleet: Fleet) -> SpeedRuns:
    """``carma_mixed_speed`` run once, the scheduler restarted, run again."""
    dag_id = "carma_mixed_speed"
    first = fleet.run(dag_id)
    fleet.tries(dag_id, first, 4)
    after_first = fleet.solo_runs(dag_id, at_least=4)
    model_text = fleet.carma("model")
    fleet.restart_scheduler()
    second = fleet.run(dag_id)
    fleet.tries(dag_id, second, 4)
    return SpeedRuns(first, second, after_first, model_text)


def _on(record: PlacementRecord) -> str:
    models = {MODEL_OF[u] for u in record.gpu_uuids}
    assert len(models) == 1, record
    return models.pop()


def test_solo_runs_are_learned_per_task_and_model_and_survive_a_restart(fleet: Fleet, speed_runs: SpeedRuns) -> None:
    dag_id = "carma_mixed_speed"
    placed = {(p.task_id, p.map_index): _on(p) for p in fleet.tries(dag_id, speed_runs.first, 4)}
    # the first run measures each task alone on both models (the larger instance fits only an A100-80GB)
    assert placed == {("gains", 0): FAST, ("gains", 1): SLOW, ("flat", 0): FAST, ("flat", 1): SLOW}

    # the task side ran at its model's speed: gains 4x faster on the A100-80GB, flat alike
    for task_id, gain in (("gains", 4.0), ("flat", 1.0)):
        results = fleet.results(dag_id, speed_runs.first, task_id)
        assert sorted(results) == [0, 1], results
        by_model = {r["gpu_models"][0]: r for r in results.values()}
        assert by_model[FAST]["speed"] == gain and by_model[SLOW]["speed"] == 1.0
        ratio = by_model[SLOW]["train_s"] / by_model[FAST]["train_s"]
        assert ratio == pytest.approx(gain, rel=0.2), f"{task_id}: trained {ratio:.2f}x faster on {FAST}"

    # the executor learned a solo run per task and model from tries that ran alone
    runs = speed_runs.after_first
    assert set(runs) == {("gains", FAST), ("gains", SLOW), ("flat", FAST), ("flat", SLOW)}, runs
    assert all(len(v) == 1 for v in runs.values()), runs
    ratio = {t: runs[(t, SLOW)][0] / runs[(t, FAST)][0] for t in ("gains", "flat")}
    saved = {t: runs[(t, SLOW)][0] - runs[(t, FAST)][0] for t in ("gains", "flat")}
    print(f"solo run times after run 1: {runs}; {SLOW}/{FAST}: {ratio}; {SLOW}-{FAST}: {saved}")
    # a try's run time includes its process's start (Airflow's task runner: 5-25 s on a loaded 2-core
    # machine, about the same for tries started together), so its ratio is below the training's 4x;
    # the seconds the A100-80GB saves are the training's: WORK_S x (1 - 1/4) for gains, none for flat
    gain = SPEED.SPEEDUP["gains"][FAST]
    expected = SPEED.WORK_S * (1 - 1 / gain)
    assert expected * 0.6 <= saved["gains"] <= expected * 1.4, saved
    assert abs(saved["flat"]) <= expected * 0.4, saved
    assert ratio["gains"] > 1.1 * ratio["flat"], ratio

    # `carma model` shows the pair's ratio learned from the two tasks measured on both
    text = speed_runs.model_text
    assert f"solo run times by GPU model: {FAST}, {SLOW}" in text, text
    line = next((ln for ln in text.splitlines() if f"{SLOW} vs {FAST}:" in ln), "")
    assert "learned from 2 task(s) run on both" in line, text
    learned = float(line.split(":", 1)[1].split("x", 1)[0])
    assert learned == pytest.approx(statistics.geometric_mean(ratio.values()), rel=0.01), line

    # after the restart the store still holds them, and the new executor learned from the second run
    after = fleet.solo_runs(dag_id, at_least=5)
    assert all(after.get(k, [])[: len(v)] == v for k, v in runs.items()), after
    assert sum(map(len, after.values())) > sum(map(len, runs.values())), after
    text = fleet.carma("model")
    assert f"{SLOW} vs {FAST}:" in text and "learned from 2 task(s) run on both" in text, text


def test_the_second_run_sends_the_gaining_task_to_the_fast_model(fleet: Fleet, speed_runs: SpeedRuns) -> None:
    """After the restart, from what the store kept: ``gains``'s small instance (4x faster on an
    A100-80GB) goes to the fast model (sharing it, or waiting for it where that wins), ``flat``'s
    keeps the V100; `carma why` says the predicted run on each model."""
    placed = {(p.task_id, p.map_index): _on(p) for p in fleet.tries("carma_mixed_speed", speed_runs.second, 4)}
    assert placed[("gains", 1)] == FAST and placed[("flat", 1)] == SLOW, placed
    why = fleet.carma("why", "carma_mixed_speed.gains[1]")
    lines = why.splitlines()
    head = next(i for i, ln in enumerate(lines) if f"run {speed_runs.second} try" in ln)
    end = next((i for i in range(head + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    said = "\n".join(lines[head:end])  # that try's lines
    assert "predicted" in said and FAST in said and SLOW in said, why


def _overlaps(records: list[PlacementRecord]) -> list[tuple[datetime, dict[str, list[str]]]]:
    """Each moment a try starts: who holds each GPU then (its tries' task ids)."""
    out = []
    for start in sorted({r.started_at for r in records if r.started_at}):
        held: dict[str, list[str]] = {u: [] for u in MODEL_OF}
        for r in records:
            assert r.started_at and r.ended_at
            if r.started_at <= start < r.ended_at:
                for u in r.gpu_uuids:
                    held[u].append(r.task_id)
        out.append((start, held))
    return out


def test_small_tasks_leave_the_80gb_gpus_to_the_tasks_that_need_them(fleet: Fleet) -> None:
    dag_id = "carma_mixed_scarce"
    for n in (1, 2):
        run = fleet.run(dag_id)
        tries = fleet.tries(dag_id, run, len(SCARCE.SMALL) + len(SCARCE.LARGE))
        layout = sorted((r.started_at, r.task_id, [MODEL_OF[u] for u in r.gpu_uuids]) for r in tries)
        print(f"run {n}: {[(t, m) for _, t, m in layout]}")
        large = [r for r in tries if r.task_id in SCARCE.LARGE]
        assert all(_on(r) == FAST for r in large)  # 35 GiB: only an A100-80GB holds one
        for r in tries:
            if r.task_id in SCARCE.SMALL and _on(r) == FAST:
                assert r.started_at
                waiting = [w.task_id for w in large if w.started_at and w.started_at > r.started_at]
                assert not waiting, f"run {n}: {r.task_id} took an {FAST} while {waiting} waited for one"
        for at, held in _overlaps(tries):
            crowded = [u for u, ts in held.items() if MODEL_OF[u] == FAST and len(ts) >= 3]
            light = [u for u, ts in held.items() if MODEL_OF[u] == SLOW and len(ts) <= 1]
            assert not (crowded and light), f"run {n} at {at}: three to an {FAST} while a {SLOW} held one: {held}"
