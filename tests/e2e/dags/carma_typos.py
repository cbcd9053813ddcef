"""End-to-end DAG: a typo in what a GPU task asks fails that task by name (tests/e2e/test_typos.py).

Three newcomer's typos (a misspelt key, a misspelt section, a misspelt gpu_task() keyword) each
fail their own task with the nearest valid key in its log; the DAG's other tasks run.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task


@dag(dag_id="carma_typos", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def typos() -> None:
    @task(executor="CarmaExecutor", executor_config={"carma": {"memroy": "20GiB"}}, retries=0)
    def misspelt_key() -> None:
        raise AssertionError("must never run")

    @task(executor="CarmaExecutor", executor_config={"crama": {"memory": "20GiB"}}, retries=0)
    def misspelt_section() -> None:
        raise AssertionError("must never run")

    @task(**gpu_task(memroy="20GiB"), retries=0)
    def misspelt_keyword() -> None:
        raise AssertionError("must never run")

    @task(**gpu_task(memory="1GiB"), retries=0)
    def spelt_right() -> str:
        return "ran"

    @task(retries=0)
    def not_a_gpu_task() -> str:
        return "ran"

    misspelt_key()
    misspelt_section()
    misspelt_keyword()
    spelt_right()
    not_a_gpu_task()


typos()
