"""How an ended try is told: an OOM at its own cap says so, a full GPU says so (issues 18 and 22)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from carma_airflow.checkpoint import CheckpointFolders
from carma_airflow.core.recovery import RecoverySettings
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.tries import Try, TryState, close_checkpoint, conclude
from carma_airflow.launching import Ended
from carma_airflow.store.records import TryOutcome
from carma_airflow.taskrun.outcome import TryResult

# a try placed with 8 GiB, stopped by its fence as the simulated GPUs' ledger and PyTorch word it
CAP_MESSAGE = (
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 40.00 GiB of which 22.00 GiB "
    "is free. Including non-PyTorch memory, this process has 9.30 GiB memory in use. 10.00 GiB allowed; this try "
    "(dag.grower) is past its cap of 10.00 GiB (framework cap, fixed at the try's start; promised 10.00 GiB; ...)"
)


def _attempt(prior_ooms: int = 0, mib: int = 8192) -> Try:
    request = TaskRequest("d/t/r/-1#1", "dag.grower", MemoryNeed(mib, "declared"))
    return Try(None, "d/t/r/-1#1", None, TryState.RUNNING, request=request, prior_ooms=prior_ooms, gpu_uuids=("G0",))


def _cap_oom(message: str = CAP_MESSAGE) -> TryResult:
    # held 9.30 GiB + asked 20.00 GiB, as its message says: what the listener writes (issue 41)
    return TryResult("up_for_retry", "cap-oom", "OutOfMemoryError", message, peak_mib=30004)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "says"),
    [("cap-oom", "CUDA OOM past its cap on G0: the try needed at least 30000 MiB"), ("cuda-oom", "more free memory")],
)
def test_an_oom_past_its_cap_is_told_apart_from_a_full_gpu(kind: str, says: str) -> None:
    attempt = Try(None, "d/t/r/-1#1", None, TryState.RUNNING, gpu_uuids=("G0",))
    result = TryResult("up_for_retry", kind, "OutOfMemoryError", "CUDA out of memory", peak_mib=30000)  # type: ignore[arg-type]
    end = conclude(attempt, Ended(0, result), RecoverySettings(max_oom_retries=2))
    assert end.outcome is TryOutcome.OOM and end.summary is not None and says in end.summary


def test_a_cap_oom_says_its_own_cap_stopped_it_and_what_its_retry_is_placed_with() -> None:
    """Issue 22: the summary (store, scheduler log, ``carma why``, the GPU page) of a try stopped
    past its cap says the fence's truth: its own cap stopped it, at the cap its message names, and
    its retry is placed with a larger reservation, so a larger cap; never "a GPU with more free
    memory" (the GPU had room: what it lacked was a cap)."""
    end = conclude(_attempt(), Ended(0, _cap_oom()), RecoverySettings(max_oom_retries=2))
    assert end.outcome is TryOutcome.OOM and not end.gave_up and end.summary is not None
    assert "more free memory" not in end.summary
    assert end.summary == (
        "CUDA OOM past its cap on G0: the try needed at least 30004 MiB and its own cap stopped it "
        "(10.00 GiB allowed); its retry is placed with 37632 MiB (was 8192 MiB) and its cap grows with it"
    )  # 30004 x 1.25 rounded up to 256 MiB: core/recovery.plan_recovery, as the executor plans the retry


def test_a_cap_oom_before_the_last_oom_retry_says_the_retry_gets_a_gpu_of_its_own() -> None:
    end = conclude(_attempt(prior_ooms=1), Ended(0, _cap_oom()), RecoverySettings(max_oom_retries=2))
    assert end.summary is not None
    assert end.summary.endswith("its retry is placed with 37632 MiB on an idle GPU of its own, its cap that whole GPU")


def test_a_cap_oom_without_its_cap_in_the_message_or_a_request_still_says_what_stopped_it() -> None:
    bare = Try(None, "d/t/r/-1#1", None, TryState.RUNNING, gpu_uuids=("G0",))
    end = conclude(bare, Ended(0, _cap_oom("CUDA out of memory; past its cap")), RecoverySettings(max_oom_retries=2))
    assert end.summary == (
        "CUDA OOM past its cap on G0: the try needed at least 30004 MiB and its own cap stopped it; "
        "its retry gets a larger reservation and a larger cap"
    )


def test_a_pytorch_oom_with_a_fraction_set_on_a_full_gpu_says_the_gpu_was_full_too() -> None:
    """PyTorch writes "... allowed;" in every OOM once a fraction is set, so the OOM of a capped
    try on a GPU that had less free than it asked for is classified past its cap too: the words
    say that the GPU was full as well, from the message's own figures."""
    full = CAP_MESSAGE.replace("of which 22.00 GiB is free", "of which 1.50 GiB is free")
    end = conclude(_attempt(), Ended(0, _cap_oom(full)), RecoverySettings(max_oom_retries=2))
    assert end.summary is not None
    assert "its cap stopped it and the GPU was full too (10.00 GiB allowed; 1.50 GiB free for 20.00 GiB asked)" in (
        end.summary
    )


def test_a_cap_oom_with_no_oom_retry_left_says_what_to_declare_and_that_its_cap_stopped_it() -> None:
    end = conclude(_attempt(prior_ooms=2), Ended(0, _cap_oom()), RecoverySettings(max_oom_retries=2))
    assert end.gave_up and end.summary is not None
    assert end.summary.startswith("CUDA OOM on 3 tries, the last at 30004 MiB; no more OOM retries. Declare ")
    assert end.summary.endswith("(on G0; past its cap: its own cap stopped the last try (10.00 GiB allowed))")


def test_a_cap_oom_keeps_the_checkpoint_folder_for_the_retry(tmp_path: Path) -> None:
    """The retry after a cap OOM resumes like any other retry: the folder goes only on success."""
    folders = CheckpointFolders(str(tmp_path))
    ti = SimpleNamespace(dag_id="dag", run_id="run1", task_id="grower", map_index=-1)
    attempt = _attempt()
    attempt.ti = ti
    folder = folders.prepare(ti)
    (folder / "train.pt").write_bytes(b"saved")
    end = conclude(attempt, Ended(0, _cap_oom()), RecoverySettings(max_oom_retries=2))
    assert close_checkpoint(attempt, end, folders) is False and (folder / "train.pt").exists()
    won = conclude(attempt, Ended(0, TryResult("success", peak_mib=30000)), RecoverySettings())  # type: ignore[arg-type]
    assert close_checkpoint(attempt, won, folders) is True and not folder.exists()


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (_cap_oom(), "CUDA OOM past its cap: its own cap stopped it (10.00 GiB allowed) (ended while its executor"),
        (
            TryResult("up_for_retry", "cuda-oom", "OutOfMemoryError", "CUDA out of memory", peak_mib=30000),  # type: ignore[arg-type]
            "CUDA out of memory (ended while its executor was gone)",
        ),
    ],
)
def test_a_gone_executors_try_that_ended_past_its_cap_is_told_so(tmp_path: Path, result: TryResult, says: str) -> None:
    """A try whose process ended while no executor watched it (peer_leftovers.conclude): its end,
    from its result file, tells a cap OOM apart from a full GPU as the executor's own summary does."""
    from carma_airflow.executor.peers.peer_leftovers import conclude as conclude_gone
    from carma_airflow.taskrun.outcome import write_result

    write_result(result, tmp_path / "results" / "ti-1.json")
    ended: list[tuple[object, ...]] = []
    store = SimpleNamespace(mark_ended=lambda *args: ended.append(args))
    peers = SimpleNamespace(state_dir=str(tmp_path), store=store)
    conclude_gone(peers, SimpleNamespace(ti_id="ti-1", key="d/t/r/-1#1"), 5.0)  # type: ignore[arg-type]
    ((key, _, outcome, peak, summary),) = ended
    assert (key, outcome, peak) == ("d/t/r/-1#1", TryOutcome.OOM, result.peak_mib) and str(summary).startswith(says)
