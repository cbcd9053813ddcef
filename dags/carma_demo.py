"""The demo: a time-compressed slice of the CARMA paper's workload on CarmaExecutor.

About 20 training tasks from the paper's task catalogue (one catalogue minute = 0.2 s here),
each declaring the memory GPUMemNet estimates for it (so maskrcnn, estimated at 8000 MiB but
peaking at 28606 MiB, hits a CUDA OOM when collocated and is retried on a GPU with room),
one 2-GPU data-parallel task, and a CPU task that summarises on LocalExecutor.  The GPU work is
carma's synthetic workload on simulated GPUs: it holds the catalogue's measured peak memory.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task
from carma_airflow.core.sharing import activity_profile
from carma_airflow.demo import DEMO_TASKS, SCALE_S_PER_MINUTE
from carma_airflow.sim.workload import load_catalog, packaged

# The four largest (each over 12 GiB, the longest runs) go first, one per idle GPU.  maskrcnn
# waits for its data on a CPU task, then is placed first beside one of them, where its 8000 MiB
# GPUMemNet estimate looks fine but its real 28606 MiB peak does not fit: CUDA OOM, then a retry
# planned from the memory it reached.
PRIORITY = {"BERT_large": 20, "Xception3": 20, "resnet3": 20, "vgg3": 20, "maskrcnn": 30}
AFTER_PREP = {"maskrcnn"}


def _train(name: str) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    t = load_catalog(packaged("task_catalog.csv"))[name]
    small = "cifar" in t.script.lower()
    out = simulated_training(
        peak_mib=t.peak_mib,
        seconds=t.solo_s / 60 * SCALE_S_PER_MINUTE,
        activity=activity_profile(t.family, t.batch_size, small).sm_activity,
    )
    return {"task": name, **out}


@dag(
    dag_id="carma_demo",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    max_active_tasks=32,
    tags=["carma", "demo"],
)
def carma_demo() -> None:
    @task
    def prepare_data() -> None:  # CPU work on LocalExecutor
        import time

        time.sleep(4)

    catalog = load_catalog(packaged("task_catalog.csv"))
    results = []
    for name in DEMO_TASKS:
        t = catalog[name]
        estimate = t.gpumemnet_mib or 0
        config = gpu_task(
            gpus=t.gpus,
            memory=estimate if estimate < 40000 else None,
            exclusive=estimate >= 40000,
            priority=PRIORITY.get(name, 10),
        )
        train = task(task_id=f"train_{name}", **config)(_train)(name)
        if name in AFTER_PREP:
            prepare_data() >> train
        results.append(train)

    @task(trigger_rule="all_done")
    def summarise(runs: list[dict[str, object]]) -> int:  # XComArgs resolve to the runs at run time
        return len(runs)

    summarise(results)  # type: ignore[arg-type]


carma_demo()
