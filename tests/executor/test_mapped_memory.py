"""Per-instance memory of mapped GPU tasks: ``memory_by_index``, and history learned per map index."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task_group
from executor_helpers import make_workload, run_until, seen_env, submit

from carma_airflow.config.task_config import check_task, gpu_task, is_mapped_task, parse_task_config
from carma_airflow.core.errors import ConfigError
from carma_airflow.executor.tries import first_request


def _mapped(task_id: str, map_index: int, config: dict[str, Any] | None, try_number: int = 1) -> Any:
    w = make_workload(task_id, config=config, try_number=try_number)
    return w.model_copy(update={"ti": w.ti.model_copy(update={"map_index": map_index})})


# -- the block -----------------------------------------------------------------------------


def test_memory_by_index_sizes_each_instance_and_falls_back_to_memory() -> None:
    cfg = parse_task_config({"carma": {"memory_by_index": ["4GiB", 12288, None, "1.5 GB"], "memory": "8GiB"}})
    assert cfg.memory_by_index == (4096, 12288, None, 1536)
    assert [cfg.memory_for(i) for i in range(6)] == [4096, 12288, 8192, 1536, 8192, 8192]
    assert cfg.memory_for(-1) == 8192  # not an instance: the task's memory
    bare = parse_task_config({"carma": {"memory_by_index": ["4GiB"]}})
    assert [bare.memory_for(i) for i in (0, 1)] == [4096, None]  # past the end, nothing declared: learned
    assert parse_task_config({"carma": {"memory": 100}}).memory_for(3) == 100


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["4GiB", "lots"], "entry 1: cannot read memory size 'lots'"),
        (["4GiB", True], "entry 1: must be a size"),
        ("4GiB", "must be a list with one size per map index"),
        ({"0": "4GiB"}, "must be a list with one size per map index"),
        ([0], "entry 0:"),
    ],
)
def test_a_bad_memory_by_index_names_the_field_and_what_to_write(value: Any, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_task_config({"carma": {"memory_by_index": value}}, where="task 'ft': executor_config")
    message = str(err.value)
    assert message.startswith("task 'ft': executor_config['carma']['memory_by_index']: "), message
    assert says in message and "write" in message, message
    with pytest.raises(ConfigError, match=r"\['memory_by_index'\]"):
        gpu_task(memory_by_index=value)  # where the DAG is written


def test_gpu_task_takes_memory_by_index() -> None:
    kwargs = gpu_task(memory_by_index=("4GiB", "12GiB"), memory="8GiB")
    assert kwargs["executor_config"] == {
        "carma": {"gpus": 1, "exclusive": False, "priority": 0, "memory": "8GiB", "memory_by_index": ["4GiB", "12GiB"]}
    }


def test_memory_by_index_on_an_unmapped_task_is_an_error() -> None:
    block = {"carma": {"memory_by_index": ["4GiB", "12GiB"]}}
    assert parse_task_config(block, mapped=True).memory_for(1) == 12288
    assert parse_task_config(block).memory_by_index == (4096, 12288)  # not known whether mapped: no check
    with pytest.raises(ConfigError) as err:
        parse_task_config(block, where="task 'ft': executor_config", mapped=False)
    assert str(err.value) == (
        "task 'ft': executor_config['carma']['memory_by_index']: only a mapped task (.partial(...).expand(...))"
        " has instances to size, and this task is not mapped; write memory='12GiB' instead"
    )


# -- the DAG, as the cluster policy sees it --------------------------------------------------


def test_check_task_on_real_airflow_tasks() -> None:
    with DAG("mapped_check", start_date=datetime(2026, 1, 1), schedule=None):
        sized = BashOperator.partial(task_id="sized", **gpu_task(memory_by_index=["4GiB", "12GiB"])).expand(
            bash_command=["echo a", "echo b"]
        )
        plain = BashOperator(task_id="plain", bash_command="echo", **gpu_task(memory_by_index=["4GiB"]))
        per_kwargs = BashOperator.partial(task_id="per_kwargs", **gpu_task()).expand_kwargs(
            [{"bash_command": "echo a", "executor_config": {"carma": {"memory": "4GiB"}}}]
        )

        @task_group
        def group(n: int) -> None:
            BashOperator(task_id="in_group", bash_command="echo", **gpu_task(memory_by_index=["1GiB", "2GiB"]))

        group.expand(n=[1, 2])

    assert is_mapped_task(sized) and not is_mapped_task(plain)
    assert check_task(sized).memory_for(1) == 12288
    with pytest.raises(ConfigError, match=r"^task 'plain': executor_config\['carma'\]\['memory_by_index'\]: only"):
        check_task(plain)
    with pytest.raises(ConfigError) as err:
        check_task(per_kwargs)
    message = str(err.value)
    assert message.startswith("task 'per_kwargs': executor_config: expand_kwargs entry 0 sets 'executor_config'")
    assert "write **gpu_task(memory_by_index=['4GiB', '12GiB', ...])" in message
    in_group = sized.dag.task_dict["group.in_group"]  # type: ignore[union-attr]
    assert is_mapped_task(in_group) and check_task(in_group).memory_for(0) == 1024


@pytest.mark.filterwarnings("ignore:Task .t. was never mapped")
def test_airflow_refuses_executor_config_in_expand_at_parse_time() -> None:
    # why memory_by_index exists: Airflow maps no executor_config (expand_kwargs fails only at run time)
    with (
        DAG("mapped_refused", start_date=datetime(2026, 1, 1), schedule=None),
        pytest.raises(TypeError, match="unmappable or already specified argument: executor_config"),
    ):
        BashOperator.partial(task_id="t", **gpu_task()).expand(executor_config=[{"carma": {"memory": 1}}])


# -- the executor ----------------------------------------------------------------------------


def _request(ex: Any, w: Any) -> Any:
    """What the executor's intake asks of the placer for this try (executor/tries/intake.py)."""
    config = parse_task_config(w.ti.executor_config, mapped=w.ti.map_index >= 0)
    return first_request(w.ti, config, ex.parts.estimator, ex.flow.learned, time.time())


def test_each_instance_gets_its_declared_memory(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB")
    config = {"memory_by_index": ["2GiB", "6GiB", None], "memory": "3GiB"}
    works = [_mapped("ft", i, config) for i in range(4)]
    got = [(_request(ex, w).memory.mib, _request(ex, w).memory.source) for w in works]
    assert got == [(2048, "declared"), (6144, "declared"), (3072, "declared"), (3072, "declared")]
    assert [_request(ex, w).label for w in works] == [f"dag.ft[{i}]" for i in range(4)]


def test_an_instance_learns_from_its_own_runs_then_from_the_whole_task(executor_factory) -> None:
    first = executor_factory(gpus="1xA100-40GB")
    now = time.time()
    first.store.add_peak("dag", "ft", 1000, now - 30, "old", 0)
    first.store.add_peak("dag", "ft", 9000, now - 20, "old", 1)
    first.store.add_peak("dag", "ft", 1500, now - 10, "older", None)  # recorded before map indexes were kept
    ex = executor_factory(gpus="1xA100-40GB")  # the next executor on this store: it reads them at start
    works = [_mapped("ft", i, None) for i in range(3)]
    needs = [_request(ex, w).memory for w in works]
    assert [n.mib for n in needs] == [1280, 9984, 9984]  # max peak x 1.1, rounded up to 256 MiB
    assert needs[0].source == "history of map index 0 (1 run(s), max 1000 MiB)"
    assert needs[1].source == "history of map index 1 (1 run(s), max 9000 MiB)"
    assert needs[2].source == "history (3 run(s), max 9000 MiB)"  # no run of its own: the whole task's
    unmapped = make_workload("ft")
    assert _request(ex, unmapped).memory.source == "history (3 run(s), max 9000 MiB)"


def test_memory_by_index_on_an_unmapped_try_runs_it_without_gpus_with_the_message(executor_factory) -> None:
    ex = executor_factory()
    w = make_workload("plain", config={"memory_by_index": ["4GiB"]})
    submit(ex, w)
    assert w.key not in ex.waiting and w.key not in ex.active
    run_until(ex, lambda: not ex.bare)
    env = seen_env("plain")
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert "executor_config['carma']['memory_by_index']: only a mapped task" in env["CARMA_CONFIG_ERROR"]
