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
