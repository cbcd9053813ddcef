"""The order in which the unit tests are handed to xdist's workers: the longest spread over them.

``pytest -n N`` (tools/test-suites: ``-m "not e2e"``) hands each worker, to start with, a run of
consecutive tests (xdist 3.8's load scheduling: a quarter of its share), then more runs as each
empties its own.  In pytest's order the benchmark smoke tests (tests/test_bench_*.py, each a minute
or two of CPU on a loaded machine) came last, together: the suite ended with one worker running them
while the others idled.  The tests listed here, with the seconds a worker spent on them
(``--durations``, ``-n 4``, a 2-core machine at a load average of 9-14, 2026-12-06, rounded; the ones made
cheap since (in-process CLI calls, --smoke benches) left out), are dealt out longest
first, each to the start of the first run of the worker with the fewest listed seconds so far
(longest processing time first), so every worker starts with its share of them and the suite ends
on short tests.  Only the order depends on these figures; the other tests keep pytest's order.  A
file listed whole keeps its tests together: they share a module fixture (one dry run), which
another worker would make again.

Without xdist the order is pytest's.  The end-to-end files have their own order, in a run of them
alone (tests/e2e/conftest.py, FILE_SECONDS).
"""

from __future__ import annotations

import os

import pytest

UNIT_SECONDS = {
    "tests/executor/test_writer.py::test_a_day_of_telemetry_with_default_settings_stays_within_the_retention": 110,
    "tests/examples/test_example_dag_files.py::test_example_dags_parse_and_their_tasks_run": 54,
    "tests/executor/test_try_life.py::test_failed_flow_starts_leak_nothing_and_stay_on_standby": 50,
    "tests/gpu/test_fence_check.py::test_fence_dry_run_passes_every_scenario_and_measures_the_context": 46,
    "tests/executor/test_peers.py::test_two_executors_on_postgres_never_book_the_same_memory": 45,
    "tests/gpu/test_dry_run.py": 43,  # one dry run of bench/gpu/run.sh, a module fixture
    "tests/taskrun/test_framework_hook.py::test_real_torch_is_capped_after_transformers_probed_for_it": 42,
    "tests/executor/test_try_life.py::test_a_failure_inside_the_flows_start_is_retried_and_the_held_tries_then_run": 40,
    "tests/executor/test_writer.py::test_telemetry_older_than_the_retention_is_pruned_in_the_background": 39,
    "tests/executor/test_peers.py::test_a_second_executor_on_sqlite_places_nothing_and_says_why": 35,
    "tests/test_bench_scarce_smoke.py::test_scarce_gpus_quick_prints_a_row_per_cell_and_the_summary": 35,
    "tests/distributed/test_hosts_cli.py::test_hosts_shows_which_host_is_live_and_what_runs_there": 35,
    "tests/test_bench_smoke.py::test_paper_table_runs_and_checks_targets": 33,
    "tests/core/test_placer.py::test_interference_aware_never_overcommits": 32,
    "tests/executor/test_try_life.py::test_callbacks_queued_on_standby_run_and_report_after_the_start": 32,
    "tests/executor/test_example_dags.py::test_example_dags_import_and_gpu_tasks_get_oom_retries": 31,
    "tests/executor/test_reliability.py::test_placement_goes_on_while_the_store_is_gone_and_nothing_is_lost": 31,
    "tests/executor/test_peers.py::test_a_restart_with_waiting_tries_leaves_the_task_its_oom_tries_and_its_plan": 31,
    "tests/sim/test_robustness_bench.py::test_grid_prints_every_cell_with_the_oracle_and_the_targets": 31,
    "tests/store/test_store_concurrency.py::test_two_processes_write_at_once": 31,
    "tests/executor/test_reasons_cadence.py::test_a_deep_queue_still_places_and_explains": 29,
    "tests/executor/test_peers.py::test_the_next_try_after_an_oom_follows_the_recovery_plan_on_the_other_scheduler": 28,
    "tests/executor/test_config_surface.py::test_airflow_config_list_shows_every_carma_option": 28,
    "tests/executor/test_writer.py::test_a_killed_writer_loses_nothing_it_had_queued": 28,
    "tests/executor/test_peers.py::test_a_failed_registration_is_retried_and_no_try_of_the_live_peer_is_touched": 28,
    "tests/executor/test_example_dags.py::test_strict_validation_turns_a_bad_config_into_a_dag_import_error": 27,
}


def _key(item: pytest.Item) -> str | None:
    """The entry of UNIT_SECONDS that ``item`` falls under: its test (any parameters), or its file."""
    path, _, name = item.nodeid.partition("::")
    test = f"{path}::{name.split('[')[0]}"
    return test if test in UNIT_SECONDS else path if path in UNIT_SECONDS else None


def dealt(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` with the listed ones at the starts of the workers' first runs (see above)."""
    chunk = max(len(items) // workers // 4, 2)  # xdist's first run per worker (LoadScheduling.schedule)
    groups: dict[str, list[pytest.Item]] = {}
    rest: list[pytest.Item] = []
    for item in items:
        key = _key(item)
        if key is None:
            rest.append(item)
        elif "::" not in key:
            groups.setdefault(key, []).append(item)  # a whole file: one unit
        else:
            groups[item.nodeid] = [item]
    if not groups or sum(len(g) for g in groups.values()) > chunk * workers // 2:
        return items
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0] * workers
    for unit in sorted(groups.values(), key=lambda g: -UNIT_SECONDS[_key(g[0]) or ""]):
        least = load.index(min(load))
        heads[least] += unit
        load[least] += UNIT_SECONDS[_key(unit[0]) or ""]  # a file's figure is its tests' together
    out: list[pytest.Item] = []
    for head in heads:
        fill = max(chunk - len(head), 0)
        out += head + rest[:fill]
        rest = rest[fill:]
    return out + rest


@pytest.hookimpl(trylast=True)  # after the -m deselection: only the tests that run are dealt
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or not items or all(item.get_closest_marker("e2e") for item in items):
        return  # no xdist, or the end-to-end tests alone (tests/e2e/conftest.py orders them)
    items[:] = dealt(items, workers)
