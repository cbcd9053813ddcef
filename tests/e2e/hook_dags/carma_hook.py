"""One GPU try that probes for torch with ``importlib.util.find_spec``, imports transformers
(which probes again at its import), then imports torch (tests/e2e/test_hook_in_real_try.py).  The
DAG file itself imports neither: the try's process does."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task


@dag(dag_id="carma_hook", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def hook() -> None:
    @task(**gpu_task(memory="4GiB"), retries=0)
    def probe_then_import() -> dict[str, object]:
        import importlib.util
        import sys

        found = importlib.util.find_spec("torch") is not None
        import transformers

        early = "torch" in sys.modules  # transformers only probed
        import torch

        return {
            "found": found,
            "early": early,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "queued": len(getattr(torch.cuda, "_queued_calls", [])),
        }

    probe_then_import()


hook()
