"""`carma why` on a mixed fleet: the task's predicted run alone on each GPU model (issue 44, item 4)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from test_ops import carma, env  # noqa: F401  (the fixture)

from carma_airflow.store.store import Store


def test_why_prints_the_predicted_run_on_each_gpu_model_once_two_models_have_runs(env: dict[str, str]) -> None:  # noqa: F811
    out = carma(env, "why", "train.bert")
    assert out.returncode == 0, out.stderr
    assert "predicted run alone by GPU model" not in out.stdout  # no solo runs by model: nothing to say
    store = Store(f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'carma.db'}")
    now = datetime.now(timezone.utc)
    for dag, task, model, seconds in (
        ("train", "bert", "H100-80GB", 600.0),
        ("train", "gpt", "H100-80GB", 300.0),
        ("train", "gpt", "V100-32GB", 900.0),
    ):
        store.add_activity(dag, task, 0.5, "gpu-alone", now, co_tasks=(), solo_s=seconds, gpu_model=model)
    store.close()
    out = carma(env, "why", "train.bert")
    assert out.returncode == 0, out.stderr
    # measured on the H100; on the V100 by the ratio learned from train.gpt, run alone on both (3x)
    assert "predicted run alone by GPU model: H100-80GB 10.0 min (measured); V100-32GB 30.0 min" in out.stdout
    assert "learned ratio" in out.stdout


def test_why_says_what_shared_first_tries_taught_of_a_task_never_run_alone(env: dict[str, str]) -> None:  # noqa: F811
    # issue 41/44: the rule prices such a task at its estimate alone; `carma why` says where that comes from
    store = Store(f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'carma.db'}")
    now = datetime.now(timezone.utc)
    for seconds, estimate in ((6207.0, 2723.0), (7000.0, None), (6500.0, 3000.0)):
        store.add_activity(
            "train",
            "bert",
            0.5,
            "process",
            now,
            co_tasks=("train.gpt",),
            shared_s=seconds,
            gpu_model="H100-80GB",
            shared_alone_s=estimate,
        )
    store.close()
    out = carma(env, "why", "train.bert")
    assert out.returncode == 0, out.stderr
    assert "run alone never measured: 3 first tries ran shared all along, the shortest 103.5 min on H100-80GB" in (
        out.stdout
    )
    assert "estimated 47.7 min alone" in out.stdout  # the median of 2,723 s and 3,000 s
    store = Store(f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'carma.db'}")
    store.add_activity("train", "bert", 0.5, "gpu-alone", now, co_tasks=(), solo_s=2900.0, gpu_model="H100-80GB")
    store.close()
    out = carma(env, "why", "train.bert")
    assert "run alone never measured" not in out.stdout  # measured now: its run alone stands
