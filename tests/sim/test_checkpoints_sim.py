"""``--checkpoint-every``: a try that crashes resumes its job from its last checkpoint (sim/engine.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from carma_airflow.cli import _register, app
from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import SimConfig, load_catalog, load_trace, simulate
from carma_airflow.sim.metrics import SimResult

_register()

CATALOG = """task,script,family,batch_size,epochs,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes
trainer,trainer,cnn,32,1,1,8192,8192,8192,8192,10
"""
TRACE = """job_id,submit_s,task,memory_mib,load_s,grows_to_mib,grows_after_s
1,0,trainer,8192,5,30720,400
"""


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cat.csv").write_text(CATALOG)
    (tmp_path / "trace.csv").write_text(TRACE)
    return tmp_path / "trace.csv", tmp_path / "cat.csv"


def _run(tmp_path: Path, every: float) -> SimResult:
    trace, catalog = _files(tmp_path)
    cfg = SimConfig(gpus=tuple(parse_gpu_list("1xA100-40GB")), estimator="oracle", isolation="auto",
                    cap_rule="promise", checkpoint_every_s=every)  # fmt: skip
    return simulate(cfg, load_trace(trace, load_catalog(catalog)))


def test_a_crashed_try_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    cold, warm = _run(tmp_path, 0), _run(tmp_path, 60)
    for r in (cold, warm):
        assert r.oom_crashes == 1 and r.tasks[0].outcome == "success" and r.tasks[0].tries == 2
    crash = 405.0  # 5 s of load, then 400 s of work: the growth past its 10 GiB cap
    assert cold.crashed_gpu_s == cold.lost_gpu_s == crash
    assert warm.crashed_gpu_s == crash and warm.lost_gpu_s == crash - 365.0  # saved at 65, 125, ... 365 s
    assert warm.tasks[0].resumed_s == 365.0 and cold.tasks[0].resumed_s == 0.0
    jct = {name: (r.tasks[0].end_s or 0.0) - r.tasks[0].submit_s for name, r in (("cold", cold), ("warm", warm))}
    assert jct["warm"] < jct["cold"] - 300  # the retry redid 600 - 365 s of work, not all 600
    assert warm.summary()["mean_slowdown"] >= 1.0  # a resumed try's slowdown is over its own work


def test_checkpoints_change_nothing_without_a_crash(tmp_path: Path) -> None:
    trace, catalog = _files(tmp_path)
    cfg = SimConfig(gpus=tuple(parse_gpu_list("1xA100-40GB")), estimator="oracle", isolation="none")
    arrivals = load_trace(trace, load_catalog(catalog))
    plain, saved = simulate(cfg, arrivals), simulate(replace(cfg, checkpoint_every_s=30), arrivals)
    assert plain.oom_crashes == saved.oom_crashes == 0
    assert plain.summary()["mean_jct_s"] == saved.summary()["mean_jct_s"]


def test_the_cli_reports_lost_gpu_seconds(tmp_path: Path) -> None:
    trace, catalog = _files(tmp_path)
    args = ["simulate", "--trace", str(trace), "--catalog", str(catalog), "--gpus", "1xA100-40GB", "--json"]
    out = CliRunner().invoke(app, [*args, "--checkpoint-every", "60", "--cap-rule", "promise"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["checkpoint_every_s"] == 60.0 and got["lost_gpu_s"] == 40.0 and got["crashed_gpu_s"] == 405.0
