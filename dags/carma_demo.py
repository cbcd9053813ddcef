"""The demo: a time-compressed slice of the CARMA paper's workload on CarmaExecutor.

About 20 training tasks from the paper's task catalogue (one catalogue minute = 0.2 s here),
each declaring the memory GPUMemNet estimates for it (so maskrcnn, estimated at 8000 MiB but
peaking at 28606 MiB, hits a CUDA OOM when collocated and is retried on a GPU with room),
one 2-GPU data-parallel task, and CPU tasks on LocalExecutor that prepare and summarise.  The GPU work is
carma's synthetic workload on simulated GPUs: it holds the catalogue's measured peak memory.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task
from carma_airflow.core.sharing import activity_profile
from carma_airflow.dev.demo import DEMO_TASKS, SCALE_S_PER_MINUTE
from carma_airflow.sim.workload import load_catalog, packaged

# The four largest (each over 12 GiB, the longest runs) go first, one per idle GPU; maskrcnn is
# next, in the same scheduling pass, so it lands beside one of them: its 8000 MiB GPUMemNet
# estimate fits there, its real 28606 MiB peak does not (CUDA OOM), and its retry is planned
# from the memory it reached.  Placed in one pass, all five start together, so the OOM does not
# depend on how fast this machine starts task processes.  Airflow's priority_weight puts the
# five in the scheduler's first batch; carma's priority orders them within the pass.
PRIORITY = {"BERT_large": 20, "Xception3": 20, "resnet3": 20, "vgg3": 20, "maskrcnn": 15}
# Mask R-CNN's memory climbs over its first iterations (variable image sizes), the others reach
# their peak at once: so its co-tenant holds its own peak before maskrcnn reaches 28606 MiB even
# when task processes start a few seconds apart on a busy machine.
RAMP_S = {"maskrcnn": 4.0}
# Every task saves its progress this often (seconds of solo work, 10 catalogue minutes) in its
# task instance's checkpoint folder; a retry goes on from the last save instead of from zero.
CHECKPOINT_EVERY_S = 10 * SCALE_S_PER_MINUTE


def _train(name: str) -> dict[str, object]:
    from carma_airflow.taskrun.simulated_training import simulated_training

    t = load_catalog(packaged("task_catalog.csv"))[name]
    small = "cifar" in t.script.lower()
    out = simulated_training(
        peak_mib=t.peak_mib,
        seconds=t.solo_s / 60 * SCALE_S_PER_MINUTE,
        activity=activity_profile(t.family, t.batch_size, small).sm_activity,
        ramp_s=RAMP_S.get(name, 0.5),
        checkpoint_every_s=CHECKPOINT_EVERY_S,  # a retry resumes from the last (docs/checkpoints.md)
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
        weight = 10 * PRIORITY.get(name, 0) + 1
        train = task(task_id=f"train_{name}", priority_weight=weight, **config)(_train)(name)
        results.append(train)

    @task(trigger_rule="all_done")
    def summarise(runs: list[dict[str, object]]) -> int:  # XComArgs resolve to the runs at run time
        return len(runs)

    prepare_data() >> summarise(results)  # type: ignore[arg-type]


carma_demo()
