"""The framework cap hook in a real Airflow try process, with the PyTorch CPU wheel and a real
transformers (issue 22's target): transformers runs ``importlib.util.find_spec("torch")`` at its
import, and the hook must still cap the ``import torch`` that follows; the hook's record in the
try's log says what was capped.  Before the fix the probe used the hook up and the log said
nothing of PyTorch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from carma_airflow.dev.devstack import AirflowStack

pytestmark = [pytest.mark.e2e, pytest.mark.db]

DAGS = Path(__file__).with_name("hook_dags")


def test_torch_imported_after_a_find_spec_probe_and_transformers_is_capped(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    (tmp_path / "home").mkdir()
    stack = AirflowStack(tmp_path / "home", DAGS, simulated_gpus="1xA100-40GB", isolation="framework")
    try:
        stack.start()
        run = stack.trigger("carma_hook")
        # a loaded machine: importing transformers and torch takes seconds of CPU each
        assert stack.wait_run("carma_hook", run, timeout=420) == "success", stack.tail("scheduler")
        result = stack.xcom("carma_hook", run, "probe_then_import")
        assert result["found"] is True and result["early"] is False
        assert result["queued"] >= 1  # the cap waits for CUDA's start (none on a CPU wheel)
        logs = list((stack.home / "logs").rglob("task_id=probe_then_import/attempt=1.log"))
        assert logs, "no log for the try"
        text = logs[0].read_text()
        assert "frameworks are capped when imported" in text  # the hook was installed
        capped = re.search(r"PyTorch capped at (\d+) MiB per GPU at its CUDA start", text)
        assert capped, text[-3000:]
        assert int(capped.group(1)) >= 4096  # at least what the try was placed with
    finally:
        stack.stop(grace_s=1.0)  # a teardown: no orderly hand-back needed
