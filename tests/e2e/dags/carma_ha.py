"""End-to-end DAG: two schedulers share one simulated GPU (tests/e2e/test_schedulers.py).

One try of 16 GiB per run; the test triggers eight runs, a moment apart, so that both schedulers
queue some (one scheduler loop queues every scheduled task it sees).  Two fit on the 40 GB GPU
at a time.  Each ramps its memory up over 10 s, as training start-up does, so a GPU booked twice
(two schedulers placing on the same free memory before either try has allocated) ends in a CUDA
OOM during the ramp.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task

PEAK_MIB = 16384
# the work after the 10 s ramp: what a double booking is caught in is the ramp (a CUDA OOM) and the
# tries' start and end in the store (more than two at once); the work only keeps two tries on the
# GPU while the others wait, which 5 s does as 15 s did (each of the four waves ~13 s shorter)
TRAIN_S = 5.0
# the kill test: tries that start before the file AIRFLOW__CARMA__HA_KILLED exists train this long
# (they must outlive Airflow's finding the killed scheduler dead), later ones TRAIN_S; with
# AIRFLOW__CARMA__HA_RELEASED (a path) they train until that file exists (written once the other
# scheduler has adopted the killed one's tries), LONG_TRAIN_S at most
LONG_TRAIN_S = float(os.environ.get("AIRFLOW__CARMA__HA_TRAIN_SECONDS", str(TRAIN_S)))


@dag(dag_id="carma_ha", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_runs=16)
def ha() -> None:
    @task(**gpu_task(memory="16GiB"), retries=0)
    def train() -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        killed = os.environ.get("AIRFLOW__CARMA__HA_KILLED")
        released = os.environ.get("AIRFLOW__CARMA__HA_RELEASED")
        before_kill = not (killed and os.path.exists(killed))
        seconds = LONG_TRAIN_S if before_kill else TRAIN_S
        until = released if before_kill else None
        out = simulated_training(peak_mib=PEAK_MIB, seconds=seconds, ramp_s=10.0, until_file=until)
        return {"gpus": out["gpus"], "peak_mib": out["peak_mib"]}

    train()


ha()
