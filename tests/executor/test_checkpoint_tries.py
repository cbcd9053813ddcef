"""Each GPU task instance has one checkpoint folder for all its tries (carma_airflow/checkpoint.py):
made before a try starts and named in its environment, what a retry resumes from said in its
placement, removed when the task instance succeeds unless kept, kept after a failure.

The tries are real processes of the executor's launcher that run simulated_training on the
simulated GPUs; only Airflow's supervisor is replaced (at BaseExecutor.run_workload)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from executor_helpers import make_workload, out_dir, run_until, submit

from carma_airflow.checkpoint import CHECKPOINT_ENV, TRY_NUMBER_ENV, last_checkpoint
from carma_airflow.core.checkpoints import resume_line
from carma_airflow.testing import try_runner_env


def checkpointed_run(workload: Any, **_: Any) -> int:
    """In the try's process: a simulated training that checkpoints every second of work."""
    from carma_airflow.core.recovery import classify_failure
    from carma_airflow.taskrun.outcome import TryResult, write_result
    from carma_airflow.testing import simulated_training

    ti = workload.ti
    plan = json.loads(os.environ["CARMA_TEST_BEHAVIOUR"]).get(ti.task_id, {})
    seen: dict[str, Any] = {
        k: os.environ.get(k) for k in (CHECKPOINT_ENV, TRY_NUMBER_ENV, "CARMA_PLACEMENT", "CUDA_VISIBLE_DEVICES")
    }
    path = Path(os.environ["CARMA_TEST_OUT"]) / f"{ti.task_id}.{ti.try_number}.json"
    try:
        seen["result"] = simulated_training(
            peak_mib=1000,
            seconds=plan["seconds"],
            ramp_s=0.0,
            step_s=0.05,
            checkpoint_every_s=1.0,
            oom_after_s=plan.get("oom_after_s") if ti.try_number == 1 else None,
        )
        if plan.get("fail"):
            raise RuntimeError("bad batch in the data loader")
    except Exception as exc:
        failure = classify_failure(type(exc).__name__, str(exc))
        seen["error"] = str(exc)
        path.write_text(json.dumps(seen))
        write_result(TryResult("failed", failure.kind.value, type(exc).__name__, str(exc), peak_mib=1000))
        return 1
    path.write_text(json.dumps(seen))
    write_result(TryResult("success", peak_mib=1000))
    return 0


@pytest.fixture
def checkpointing(executor_factory, monkeypatch: pytest.MonkeyPatch):
    for name, value in try_runner_env(checkpointed_run).items():
        monkeypatch.setenv(name, value)  # before the factory starts the executor's launcher
    return executor_factory


def seen(task_id: str, try_number: int) -> dict[str, Any]:
    return json.loads((out_dir() / f"{task_id}.{try_number}.json").read_text())


def test_an_oom_retry_finds_the_same_folder_resumes_and_the_folder_goes_on_success(checkpointing) -> None:
    ex = checkpointing(behaviour={"t": {"seconds": 3.0, "oom_after_s": 2.0}})
    root = Path(ex.settings.checkpoint_root)
    submit(ex, make_workload("t", config={"memory": "2GiB"}))
    run_until(ex, lambda: not ex.active, timeout=60)
    first = seen("t", 1)
    assert "CUDA out of memory" in first["error"]
    folder = Path(first[CHECKPOINT_ENV])
    assert folder == root / "dag" / "run1" / "t" and first[TRY_NUMBER_ENV] == "1"
    saved = last_checkpoint(folder)
    assert saved is not None and saved.step == 2 and saved.try_number == 1  # kept after the OOM
    assert "resumed" not in first["CARMA_PLACEMENT"]  # try 1 had nothing to resume from

    submit(ex, make_workload("t", try_number=2, config={"memory": "2GiB"}))
    run_until(ex, lambda: not ex.active, timeout=60)
    second = seen("t", 2)
    assert Path(second[CHECKPOINT_ENV]) == folder and second[TRY_NUMBER_ENV] == "2"
    assert "resumed from step 2 (checkpoint of " in second["CARMA_PLACEMENT"]  # the log's first line
    assert second["result"]["resumed_from_s"] == pytest.approx(2.0, abs=0.3)

    records = {r.try_number: r for r in ex.store.latest_for("dag", "t")}
    line = resume_line(2, records[2].reasons)
    assert line is not None and line.startswith("try 2 resumed from step 2 (checkpoint of ")
    assert line.endswith("UTC, saved by try 1)")
    assert resume_line(1, records[1].reasons) is None

    from carma_airflow.ui.state import build_state

    state = build_state(ex.store)
    recovery = state["ooms"][0]["recovery"]
    assert recovery["text"].startswith("recovered: try 2 succeeded on ") and "resumed from step 2" in recovery["text"]

    assert not folder.exists() and not (root / "dag").exists()  # the task instance succeeded


def test_the_retry_after_a_gpu_fault_resumes_on_another_gpu(checkpointing) -> None:
    from carma_airflow.monitor.ledger import Ledger

    ex = checkpointing(behaviour={"g": {"seconds": 3.0}})
    submit(ex, make_workload("g", config={"memory": "2GiB"}, author_retries=1))
    run_until(ex, lambda: any(a.pid > 0 for a in Ledger(ex.parts.ledger_path).allocations()), timeout=60)
    folder = Path(ex.settings.checkpoint_root) / "dag" / "run1" / "g"
    run_until(ex, lambda: last_checkpoint(folder) is not None, timeout=30)  # its first checkpoint (1 s of work)
    (gpu,) = next(iter(ex.active.values())).gpu_uuids
    Ledger(ex.parts.ledger_path).set_fault(gpu, "Xid 79: GPU has fallen off the bus")
    run_until(ex, lambda: not ex.active, timeout=60)
    first = seen("g", 1)
    assert "unspecified launch failure" in first["error"]
    assert Path(first[CHECKPOINT_ENV]) == folder
    saved = last_checkpoint(folder)
    assert saved is not None and saved.step >= 1

    submit(ex, make_workload("g", try_number=2, config={"memory": "2GiB"}, author_retries=1))
    run_until(ex, lambda: not ex.active, timeout=60)
    second = seen("g", 2)
    assert Path(second[CHECKPOINT_ENV]) == folder and second["CUDA_VISIBLE_DEVICES"] != gpu
    assert f"resumed from step {saved.step} (checkpoint of " in second["CARMA_PLACEMENT"]
    assert second["result"]["resumed_from_s"] >= 1.0


def test_the_try_after_a_scheduler_restart_resumes_from_the_same_folder(checkpointing) -> None:
    """The scheduler dies and its try with it; the next scheduler's executor (a new process: its
    own CheckpointFolders over the same root) is handed the reset task instance's next try number,
    which finds the folder try 1 saved in and resumes from its last checkpoint."""
    import signal
    import time

    from executor_helpers import abandon

    ex = checkpointing(behaviour={"r": {"seconds": 30.0}})
    submit(ex, make_workload("r", config={"memory": "2GiB"}))
    folder = Path(ex.settings.checkpoint_root) / "dag" / "run1" / "r"
    run_until(ex, lambda: (saved := last_checkpoint(folder)) is not None and saved.step >= 1, timeout=60)
    (attempt,) = ex.active.values()
    assert attempt.handle is not None and attempt.handle.pid is not None
    os.killpg(attempt.handle.pid, signal.SIGKILL)  # the host went down with the scheduler
    deadline = time.time() + 20
    while attempt.handle.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    abandon(ex)
    saved = last_checkpoint(folder)
    assert saved is not None and saved.step >= 1 and saved.try_number == 1

    restarted = checkpointing(behaviour={"r": {"seconds": 2.0}})
    assert restarted.flow is not ex.flow and restarted.flow.starter.checkpoints is not ex.flow.starter.checkpoints
    submit(restarted, make_workload("r", try_number=2, config={"memory": "2GiB"}))
    run_until(restarted, lambda: not restarted.active, timeout=60)
    second = seen("r", 2)
    assert Path(second[CHECKPOINT_ENV]) == folder and second[TRY_NUMBER_ENV] == "2"
    assert f"resumed from step {saved.step} (checkpoint of " in second["CARMA_PLACEMENT"]
    assert second["result"]["resumed_from_s"] >= 1.0
    assert not folder.exists()  # try 2 succeeded: the folder goes


def test_a_kept_folder_stays_after_success(checkpointing) -> None:
    ex = checkpointing(behaviour={"k": {"seconds": 1.5}}, checkpoint_keep="True")
    submit(ex, make_workload("k", config={"memory": "2GiB"}))
    run_until(ex, lambda: not ex.active, timeout=60)
    folder = Path(seen("k", 1)[CHECKPOINT_ENV])
    assert "error" not in seen("k", 1)
    saved = last_checkpoint(folder)
    assert saved is not None and saved.step == 1


def test_a_failed_try_leaves_its_folder_for_the_next(checkpointing) -> None:
    ex = checkpointing(behaviour={"f": {"seconds": 1.5, "fail": True}})
    submit(ex, make_workload("f", config={"memory": "2GiB"}))
    run_until(ex, lambda: not ex.active, timeout=60)
    first = seen("f", 1)
    assert "bad batch" in first["error"]
    saved = last_checkpoint(Path(first[CHECKPOINT_ENV]))
    assert saved is not None and saved.step == 1  # not removed: a retry (or a clear) resumes from it


def test_a_checkpoint_root_must_be_absolute(tmp_path: Path) -> None:
    from carma_airflow.config.settings import CarmaSettings
    from carma_airflow.core.errors import ConfigError

    settings = CarmaSettings.load({"gpu_backend": "simulated"}.get, str(tmp_path))
    assert settings.checkpoint_root == str(tmp_path / "carma" / "checkpoints")
    assert settings.checkpoint_keep is False
    with pytest.raises(ConfigError, match="checkpoint_root = 'ckpt' is relative; write an absolute path"):
        CarmaSettings.load({"gpu_backend": "simulated", "checkpoint_root": "ckpt"}.get, str(tmp_path))
