"""`carma gpus`, `carma placements` and `carma why` against a real store and simulated GPUs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    out.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CARMA__GPU_BACKEND="simulated",
        AIRFLOW__CARMA__SIMULATED_GPUS="2xA100-40GB,1xH100-80GB",
        AIRFLOW__CARMA__HOST="gpu-01",
    )
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    now = datetime.now(timezone.utc)
    store.upsert_placement(
        PlacementRecord(
            key="k1",
            dag_id="train",
            task_id="bert",
            run_id="r1",
            try_number=1,
            decided_at=now,
            outcome=TryOutcome.RUNNING,
            gpu_uuids=("GPU-SIM-0001",),
            label="train.bert",
            estimate_mib=12288,
            estimate_source="declared",
            summary="placed on GPU 1 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none",
            reasons=("GPU 1 (A100-40GB): 39.5 GiB free",),
        )
    )
    store.upsert_placement(
        PlacementRecord(
            key="k2",
            dag_id="train",
            task_id="gpt",
            run_id="r1",
            try_number=1,
            decided_at=now,
            outcome=TryOutcome.WAITING,
            label="train.gpt",
            estimate_mib=70000,
            estimate_source="declared",
            summary="waiting: no GPU with 70.3 GiB free (2 memory, 1 tenant-cap)",
        )
    )
    store.close()
    return out


def carma(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``carma ARGS`` run in this process (why_helpers.carma); the console script itself runs in
    test_placements_json_filters_by_dag."""
    from why_helpers import carma as in_process

    return in_process(env, *args)


def test_gpus_lists_every_gpu_with_its_tenants(env: dict[str, str]) -> None:
    out = carma(env, "gpus", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["index"], r["name"]) for r in rows] == [(0, "A100-40GB"), (1, "A100-40GB"), (2, "H100-80GB")]
    assert rows[1]["tenants"] == ["train.bert"] and rows[0]["tenants"] == []
    assert all(r["host"] == "gpu-01" and r["risk"] == "ok" for r in rows)
    table = carma(env, "gpus")
    assert table.returncode == 0 and "train.bert" in table.stdout


def test_why_explains_waiting_and_placed_tasks(env: dict[str, str]) -> None:
    waiting = carma(env, "why", "train.gpt")
    assert waiting.returncode == 0, waiting.stderr
    assert "waiting: no GPU with 70.3 GiB free" in waiting.stdout
    placed = carma(env, "why", "train.bert")
    assert "placed on GPU 1 (A100-40GB)" in placed.stdout and "declared" in placed.stdout
    missing = carma(env, "why", "train.nothing")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no placement recorded")
    bad = carma(env, "why", "no_dot")
    assert bad.returncode == 2 and "DAG_ID.TASK_ID" in bad.stderr


def test_placements_json_filters_by_dag(env: dict[str, str]) -> None:
    from why_helpers import carma_script  # the console script, in a process of its own as a user runs it

    out = carma_script(env, "placements", "--dag-id", "train", "--json")
    rows = json.loads(out.stdout)
    assert {r["task_id"] for r in rows} == {"bert", "gpt"}
    assert {r["outcome"] for r in rows} == {"running", "waiting"}
    assert json.loads(carma_script(env, "placements", "--dag-id", "other", "--json").stdout) == []


ANSI = re.compile(r"\x1b\[[0-9;]*m")  # rich's styles on a terminal
LONG = "trial_c_magnitude_pruning_sweep.train_resnet152_imagenet_long_name"


def _add_tries(env: dict[str, str], *records: PlacementRecord) -> None:
    store = Store(f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'carma.db'}")
    for rec in records:
        store.upsert_placement(rec)
    store.close()


def _running(key: str, label: str, map_index: int = -1, task_id: str = "t") -> PlacementRecord:
    return PlacementRecord(
        key=key,
        dag_id="sweep",
        task_id=task_id,
        run_id="r1",
        try_number=1,
        decided_at=datetime.now(timezone.utc),
        map_index=map_index,
        outcome=TryOutcome.RUNNING,
        gpu_uuids=("GPU-SIM-0000",),
        label=label,
        summary=f"placed on GPU 0 (A100-40GB): index {map_index}",
    )


def test_gpus_in_a_pipe_prints_whole_task_names(env: dict[str, str]) -> None:
    _add_tries(env, _running("long", LONG))
    narrow = {**env, "COLUMNS": "60"}  # a pipe must not take a terminal's width from COLUMNS either
    piped = carma(narrow, "gpus")
    assert piped.returncode == 0, piped.stderr
    assert LONG in piped.stdout and "…" not in piped.stdout, piped.stdout


def test_gpus_on_a_narrow_terminal_fits_it_unless_wide(env: dict[str, str]) -> None:
    _add_tries(env, _running("long", LONG))
    terminal = {**env, "TTY_COMPATIBLE": "1", "COLUMNS": "60", "NO_COLOR": "1"}  # rich: "this is a terminal"
    fitted = carma(terminal, "gpus")
    assert fitted.returncode == 0, fitted.stderr
    text = ANSI.sub("", fitted.stdout)
    assert max(len(line) for line in text.splitlines()) <= 60 and LONG not in text, text
    wide = carma(terminal, "gpus", "--wide")
    assert wide.returncode == 0, wide.stderr
    text = ANSI.sub("", wide.stdout)
    assert LONG in text and "…" not in text, text


def test_why_on_a_mapped_task_names_each_map_index(env: dict[str, str]) -> None:
    _add_tries(env, *(_running(f"m{i}", f"sweep.trial[{i}]", map_index=i, task_id="trial") for i in range(3)))
    out = carma(env, "why", "sweep.trial")
    assert out.returncode == 0, out.stderr
    headers = [line for line in out.stdout.splitlines() if not line.startswith(" ")]
    assert headers == [
        "sweep.trial no activity learned yet (prior 0.50)",  # of the task: every index shares it
        *(f"sweep.trial[{i}] run r1 try 1: running" for i in (2, 1, 0)),
    ]
    plain = carma(env, "why", "train.bert")  # not mapped: no index
    assert plain.stdout.splitlines()[1] == "train.bert run r1 try 1: running"
    one = carma(env, "why", "sweep.trial[1]")  # one instance, by the label the CLI prints
    assert one.returncode == 0, one.stderr
    assert [line for line in one.stdout.splitlines() if not line.startswith(" ")][1:] == [
        "sweep.trial[1] run r1 try 1: running"
    ]
    missing = carma(env, "why", "sweep.trial[7]")
    assert missing.returncode != 0 and "no placement recorded for sweep.trial[7]" in missing.stderr
    bad = carma(env, "why", "sweep.trial[x]")
    assert bad.returncode != 0 and "DAG_ID.TASK_ID[N]" in bad.stderr


# -- what the executor learned (issue 13) ------------------------------------------------------


def _open(env: dict[str, str]) -> Store:
    return Store(f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'carma.db'}")


def _learned_model() -> dict[str, object]:
    from carma_airflow.core.interference import CollocationObservation, InterferenceModel, slowdown

    model = InterferenceModel()
    for i in range(20):
        own, co = 0.3 + 0.03 * (i % 10), [0.2 + 0.04 * (i % 7)]
        model = model.observe("A100-40GB", CollocationObservation.steady(slowdown(own, co, 0.9, 0.8), own, co))
    model = model.observe("H100-80GB", CollocationObservation.steady(1.3, 0.5, [0.4]))
    return model.to_dict()


def test_model_with_nothing_learned_says_so_and_names_the_prior(env: dict[str, str]) -> None:
    out = carma(env, "model")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("nothing learned yet: every GPU model uses the prior (beta 0.10, activity scale k 1")
    data = json.loads(carma(env, "model", "--json").stdout)
    assert data["models"] == [] and data["prior"]["beta"] == 0.1 and data["written_at"] is None


def test_model_prints_each_gpu_models_fit(env: dict[str, str]) -> None:
    store = _open(env)
    store.put_snapshot("model:interference", datetime.now(timezone.utc), _learned_model())
    store.close()
    out = carma(env, "model")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("learned interference (model:interference, written ")
    assert lines[1].startswith("a100-40gb: learned from 20 observations (20 kept, 0 outliers), confidence ")
    assert lines[2].startswith("  beta ") and "range" in lines[2] and lines[2].endswith("prior 0.100")
    assert lines[3].startswith("  activity scale k ") and lines[3].endswith("prior 1.000")
    assert lines[4] == "h100-80gb: still the prior (1 of 10 observations needed), confidence 0.10"
    assert lines[-1] == "GPU models not listed use the prior: beta 0.10, activity scale k 1.00"
    data = json.loads(carma(env, "model", "--json").stdout)
    a100 = data["models"][0]
    assert (a100["gpu_model"], a100["learned"], a100["count"]) == ("a100-40gb", True, 20)
    assert a100["beta"] != 0.5 and len(a100["beta_range"]) == 2 and a100["prior"]["activity_scale"] == 1.0


def test_model_warns_about_an_entry_it_cannot_read(env: dict[str, str]) -> None:
    store = _open(env)
    store.put_snapshot("model:interference", datetime.now(timezone.utc), {**_learned_model(), "t4": "garbage"})
    store.close()
    out = carma(env, "model")
    assert out.returncode == 0, out.stderr
    assert "warning: model:interference t4: not a fit (str)" in out.stderr
    assert "a100-40gb: learned" in out.stdout and "t4" not in out.stdout


def test_why_shows_the_tasks_learned_activity(env: dict[str, str]) -> None:
    store = _open(env)
    for i, value in enumerate([0.40, 0.44, 0.42, 0.41, 0.43]):
        store.add_activity("train", "bert", value, "process", 1_900_000_000.0 + i, run_id=f"r{i}")
    store.close()
    out = carma(env, "why", "train.bert")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "train.bert activity: 0.42 (5 tries, spread 0.02, process)"
    rows = json.loads(carma(env, "why", "train.bert", "--json").stdout)
    assert rows[0]["activity"]["sm_activity"] == pytest.approx(0.42) and rows[0]["activity"]["count"] == 5
    unknown = carma(env, "why", "train.gpt")
    assert unknown.stdout.splitlines()[0] == "train.gpt no activity learned yet (prior 0.50)"


def test_gpus_shows_a_tenants_activity_where_the_executor_published_it(env: dict[str, str]) -> None:
    _add_tries(env, _running("k3", "sweep.t"))
    tenant = {"label": "train.bert", "key": "k1", "reserved_mib": 12288, "since": 0.0, "activity": 0.42}
    older = {"label": "sweep.t", "key": "k3", "reserved_mib": 1000, "since": 0.0}  # an executor before issue 13
    body = {"version": 1, "gpus": [{"uuid": "GPU-SIM-0001", "tenants": [tenant]},
                                   {"uuid": "GPU-SIM-0000", "tenants": [older]}]}  # fmt: skip
    store = _open(env)
    store.put_snapshot("executor:gpu-01", datetime.now(timezone.utc), body)
    store.close()
    rows = json.loads(carma(env, "gpus", "--json").stdout)
    assert (rows[1]["tenants"], rows[1]["tenant_activity"]) == (["train.bert"], [0.42])
    assert (rows[0]["tenants"], rows[0]["tenant_activity"]) == (["sweep.t"], [None])
    table = carma(env, "gpus")
    assert "train.bert (activity 0.42)" in table.stdout and "sweep.t (activity" not in table.stdout
