"""simulated_training checkpoints and resumes like a real training (carma_airflow/testing.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carma_airflow.checkpoint import CHECKPOINT_ENV, TRY_NUMBER_ENV, last_checkpoint
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.testing import SimulatedCudaOOM, simulated_training

GPU0 = "GPU-SIM-0000"


@pytest.fixture
def on_gpu0(monkeypatch: pytest.MonkeyPatch, ledger: Ledger, tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU0)
    monkeypatch.setenv("CARMA_SIM_LEDGER", str(ledger.path))
    monkeypatch.setenv(CHECKPOINT_ENV, str(folder))
    monkeypatch.setenv(TRY_NUMBER_ENV, "1")
    return folder


def test_an_oom_retry_resumes_from_the_last_checkpoint(
    on_gpu0: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kw = {"peak_mib": 1000, "seconds": 3.0, "ramp_s": 0.0, "step_s": 0.05, "checkpoint_every_s": 1.0}
    with pytest.raises(SimulatedCudaOOM, match="CUDA out of memory"):
        simulated_training(**kw, oom_after_s=2.5)  # checkpoints of 1 s and 2 s of work, then the crash
    assert ledger.allocations() == []  # released, crash or not
    saved = last_checkpoint(on_gpu0)
    assert saved is not None and saved.step == 2 and saved.try_number == 1
    assert 2.0 <= json.loads((on_gpu0 / "simulated-training.json").read_text())["done_s"] < 2.5

    monkeypatch.setenv(TRY_NUMBER_ENV, "2")
    second = simulated_training(**kw)
    assert second["resumed_from_s"] == pytest.approx(2.0, abs=0.2)
    assert second["train_s"] < 1.6  # the 1 s left (a loaded machine's margin), not 3 s from zero
    said = capsys.readouterr().out
    assert "[carma] try 2 resumed from step 2 (checkpoint of " in said and "UTC, saved by try 1)" in said


def test_without_a_checkpoint_interval_nothing_is_saved_or_resumed(on_gpu0: Path) -> None:
    out = simulated_training(peak_mib=100, seconds=0.3, ramp_s=0.0, step_s=0.05)
    assert out["resumed_from_s"] is None and out["checkpoints"] == 0
    assert not on_gpu0.exists()


def test_a_checkpoint_folder_is_needed_to_checkpoint(on_gpu0: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECKPOINT_ENV)
    with pytest.raises(Exception, match="CARMA_CHECKPOINT_DIR is not set"):
        simulated_training(peak_mib=100, seconds=0.3, checkpoint_every_s=0.1)
    with pytest.raises(ValueError, match="checkpoint_every_s must be > 0"):
        simulated_training(peak_mib=100, seconds=0.3, checkpoint_every_s=0)


def test_a_finished_checkpoint_does_not_run_again(on_gpu0: Path, ledger: Ledger) -> None:
    on_gpu0.mkdir(parents=True)
    (on_gpu0 / "simulated-training.json").write_text(json.dumps({"done_s": 10.0}))
    out = simulated_training(peak_mib=100, seconds=2.0, ramp_s=0.0, checkpoint_every_s=0.5)
    assert out["resumed_from_s"] == 2.0 and out["train_s"] < 0.5
