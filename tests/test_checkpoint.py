"""The checkpoint helper a task calls and the executor's folders (carma_airflow/checkpoint.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from carma_airflow import checkpoint_dir as exported_checkpoint_dir
from carma_airflow.checkpoint import (
    CHECKPOINT_ENV,
    PROGRESS_FILE,
    TRY_NUMBER_ENV,
    CheckpointError,
    CheckpointFolders,
    atomic_path,
    checkpoint_dir,
    last_checkpoint,
    record_checkpoint,
    record_resume,
)
from carma_airflow.core.checkpoints import RESUME_REASON


def ti(run_id: str = "manual__2026-12-02T02:50:15+00:00", map_index: int = -1, try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(dag_id="nightly", run_id=run_id, task_id="train", map_index=map_index, try_number=try_number)


# -- the task's side ------------------------------------------------------------------------------


def test_outside_carma_the_helper_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHECKPOINT_ENV, raising=False)
    with pytest.raises(CheckpointError, match=r"CARMA_CHECKPOINT_DIR is not set.*CarmaExecutor.*default="):
        checkpoint_dir()
    with pytest.raises(CheckpointError, match="CARMA_CHECKPOINT_DIR"):
        last_checkpoint()


def test_the_helper_returns_the_executors_folder_or_the_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(CHECKPOINT_ENV, raising=False)
    local = checkpoint_dir(default=tmp_path / "local")
    assert local == tmp_path / "local" and local.is_dir()
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path / "carma" / "x"))
    got = exported_checkpoint_dir(default=tmp_path / "local")  # under CarmaExecutor its folder wins
    assert got == tmp_path / "carma" / "x" and got.is_dir()


def test_a_folder_that_cannot_be_made_is_a_checkpoint_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path / "file" / "sub"))
    with pytest.raises(CheckpointError, match="cannot make the checkpoint folder"):
        checkpoint_dir()


def test_progress_is_recorded_and_read_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(TRY_NUMBER_ENV, "1")
    assert last_checkpoint(tmp_path) is None
    record_checkpoint(100, folder=tmp_path, at=1000.0)
    saved = record_checkpoint(200, epoch=2, folder=tmp_path, at=2000.0)
    assert last_checkpoint(tmp_path) == saved
    assert saved.step == 200 and saved.epoch == 2 and saved.try_number == 1 and saved.saved_at == 2000.0
    assert [p.name for p in tmp_path.iterdir()] == [PROGRESS_FILE]  # no temporary file left
    with pytest.raises(CheckpointError, match="step must be an int >= 0"):
        record_checkpoint(-1, folder=tmp_path)


def test_an_unreadable_record_is_ignored_with_a_warning(tmp_path: Path, caplog) -> None:
    (tmp_path / PROGRESS_FILE).write_text("{not json")
    assert last_checkpoint(tmp_path) is None
    assert "ignoring the checkpoint progress record" in caplog.text


def test_the_resume_line_goes_to_the_log(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(TRY_NUMBER_ENV, "1")
    saved = record_checkpoint(1800, folder=tmp_path, at=1_764_643_990.0)  # 02:53:10 UTC
    monkeypatch.setenv(TRY_NUMBER_ENV, "2")
    line = record_resume(saved)
    assert line == "try 2 resumed from step 1800 (checkpoint of 02:53:10 UTC, saved by try 1)"
    assert capsys.readouterr().out == f"[carma] {line}\n"
    assert record_resume(step=5).startswith("try 2 resumed from step 5")
    assert record_resume(None).startswith("try 2 resumed from a checkpoint (no step recorded: call record_checkpoint")


def test_atomic_path_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(RuntimeError, match="killed mid-save"), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-save")
    assert target.read_bytes() == b"first"  # the last whole checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_importing_the_helper_loads_no_airflow() -> None:
    code = (
        "import sys, carma_airflow.checkpoint\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'sqlalchemy', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the executor's side --------------------------------------------------------------------------


def test_a_task_instance_keeps_its_folder_across_tries_and_others_get_their_own(tmp_path: Path) -> None:
    folders = CheckpointFolders(tmp_path)
    first, retry = folders.prepare(ti(try_number=1)), folders.prepare(ti(try_number=2))
    assert first == retry and first.is_dir()
    assert CheckpointFolders(tmp_path).of(ti(try_number=3)) == first  # a restarted executor's new try too
    assert first == tmp_path / "nightly" / "manual__2026-12-02T02%3A50%3A15%2B00%3A00" / "train"
    others = {folders.of(ti(map_index=0)), folders.of(ti(map_index=1)), folders.of(ti(run_id="r2")), first}
    assert len(others) == 4


@pytest.mark.parametrize("run_id", ["../../../etc", "..", "a/../../b", "/etc/passwd"])
def test_no_run_id_leaves_the_root(tmp_path: Path, run_id: str) -> None:
    root = tmp_path / "root"
    path = CheckpointFolders(root).prepare(ti(run_id=run_id))
    assert path.resolve().parent.parent.parent == root.resolve()


def test_success_removes_the_folder_and_empty_parents_but_not_a_neighbour(tmp_path: Path) -> None:
    folders = CheckpointFolders(tmp_path)
    mine, neighbour = folders.prepare(ti(map_index=0)), folders.prepare(ti(map_index=1))
    (mine / "model.pt").write_bytes(b"x")
    assert folders.finished(ti(map_index=0)) and not mine.exists()
    assert neighbour.is_dir()  # the other instance of the run still runs
    assert folders.finished(ti(map_index=1))
    assert list(tmp_path.iterdir()) == []  # the run's and the DAG's folders went once empty
    assert not folders.finished(ti(map_index=1))  # nothing left to remove


def test_kept_folders_stay_after_success(tmp_path: Path) -> None:
    folders = CheckpointFolders(tmp_path, keep=True)
    path = folders.prepare(ti())
    (path / "model.pt").write_bytes(b"x")
    assert not folders.finished(ti()) and (path / "model.pt").exists()


def test_what_a_try_will_find_is_said(tmp_path: Path) -> None:
    folders = CheckpointFolders(tmp_path)
    path = folders.prepare(ti())
    assert folders.resume_reason(path) is None  # a first try: nothing to resume from
    (path / "model.pt").write_bytes(b"x")
    no_record = folders.resume_reason(path)
    assert no_record is not None and no_record.startswith(RESUME_REASON + "found a checkpoint of ")
    assert "1 file(s), no progress record" in no_record
    (path / PROGRESS_FILE).write_text(json.dumps({"step": 42, "saved_at": 1_764_643_990.0, "try_number": 1}))
    said = folders.resume_reason(path)
    assert said == RESUME_REASON + "resumed from step 42 (checkpoint of 02:53:10 UTC, saved by try 1)"


def test_a_try_is_told_once_what_it_resumes_from_and_runs_without_a_folder_it_cannot_have(
    tmp_path: Path, caplog
) -> None:
    folders = CheckpointFolders(tmp_path / "root")
    path, found = folders.for_try("k#1", ti())
    assert path is not None and path.is_dir() and found is None and folders.resume_reasons("k#1") == []
    record_checkpoint(7, folder=path, at=1_764_643_990.0)
    again, found = folders.for_try("k#2", ti(try_number=2))
    assert again == path and found is not None and "resumed from step 7" in found
    assert folders.resume_reasons("k#2") == [found] and folders.resume_reasons("k#2") == []  # once
    (tmp_path / "file").write_text("x")
    blocked = CheckpointFolders(tmp_path / "file")
    assert blocked.for_try("k#3", ti()) == (None, None)
    assert "no checkpoint folder" in caplog.text and "checkpoint_root" in caplog.text
