"""`carma model` shows the run-time ratios between GPU models learned from solo run times (issue 44)."""

from __future__ import annotations

import json

from test_ops import _open, carma, env  # noqa: F401  (env: the fixture)


def test_carma_model_shows_the_learned_ratio_and_the_prior_until_then(env: dict[str, str]) -> None:  # noqa: F811
    store = _open(env)
    store.add_activity("dag", "a", 0.3, "process", 1_900_000_000.0, co_tasks=[], solo_s=400.0, gpu_model="V100-32GB")
    store.add_activity("dag", "a", 0.3, "process", 1_900_000_001.0, co_tasks=[], solo_s=100.0, gpu_model="H100-80GB")
    store.add_activity("dag", "b", 0.3, "process", 1_900_000_002.0, co_tasks=[], solo_s=50.0, gpu_model="T4")
    store.close()
    out = carma(env, "model")
    assert out.returncode == 0, out.stderr
    assert "solo run times by GPU model: H100-80GB, T4, V100-32GB" in out.stdout
    assert "V100-32GB vs H100-80GB: 4.00x the run time" in out.stdout and "learned from 1 task(s)" in out.stdout
    assert "T4 vs H100-80GB" in out.stdout and "spec-sheet prior" in out.stdout  # no task ran on both
    data = json.loads(carma(env, "model", "--json").stdout)
    got = {(r["slow"], r["fast"]): r for r in data["speed_ratios"]}
    assert got[("V100-32GB", "H100-80GB")]["source"] == "learned"
    assert got[("T4", "H100-80GB")]["source"] == "spec" and got[("T4", "H100-80GB")]["ratio"] > 1
