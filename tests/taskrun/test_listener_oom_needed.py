"""The listener leaves what a try that crashed on a full GPU needed (issue 41): what it held plus
what it asked for, so the executor sizes its retry from that, not from what it held."""

from __future__ import annotations

import pytest

from carma_airflow.monitor.ledger_oom import SimulatedCudaOOM
from carma_airflow.taskrun import listener
from carma_airflow.taskrun.outcome import RESULT_ENV, read_result

FULL_GPU = (
    "CUDA out of memory. Tried to allocate 12.70 GiB. GPU 0 has a total capacity of 40.00 GiB of which 3.10 GiB "
    "is free. Including non-PyTorch memory, this process has 4.88 GiB memory in use. (simulated GPU G0)"
)


def test_a_full_gpu_oom_leaves_held_plus_asked(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    result = tmp_path / "result.json"
    monkeypatch.setenv(RESULT_ENV, str(result))
    monkeypatch.setattr(listener, "peak_mib_of_this_process", lambda: 4998)  # what the ledger saw it hold
    listener.on_task_instance_failed(None, None, SimulatedCudaOOM(FULL_GPU))
    saved = read_result(result)
    assert saved is not None and saved.is_oom and not saved.past_cap
    assert saved.peak_mib is not None and saved.peak_mib >= 4998 + 13000  # 4.88 GiB + 12.70 GiB: 18002 MiB
    assert "it needed at least 18002 MiB (held plus asked; its peak held 4998 MiB)" in capsys.readouterr().out
