"""The order in which the unit tests are handed to xdist's workers: the longest spread over them.

``pytest -n N`` (tools/test-suites: ``-m "not e2e"``) hands each worker, to start with, a run of
consecutive tests (xdist 3.8's load scheduling: a quarter of its share), then more runs as each
empties its own.  In pytest's order the benchmark smoke tests (tests/test_bench_*.py, each a minute
or two of CPU on a loaded machine) came last, together: the suite ended with one worker running them
while the others idled.  The tests listed here, with the seconds a worker spent on them
(``--durations``, ``-n 2``, a loaded 2-core machine, 2026-12-06, rounded), are dealt out longest
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
    "tests/test_bench_smoke.py::test_learned_interference_prints_what_the_placer_knew_and_the_targets": 108,
    "tests/test_bench_smoke.py::test_speed_quick_prints_every_figure_as_json": 84,
    "tests/sim/test_bench_fencing.py::test_fencing_bench_prints_each_hosts_rules_against_none": 71,  # -n 1
    "tests/sim/test_robustness_bench.py::test_grid_prints_every_cell_with_the_oracle_and_the_targets": 30,  # -n 1
    "tests/gpu/test_dry_run.py": 50,  # one dry run of bench/gpu/run.sh, a module fixture
    "tests/fuzz/test_fuzz_interference_fit.py::test_a_refit_never_fails_and_predicts_speeds_within_their_intervals": 46,
    "tests/executor/test_writer.py::test_a_day_of_telemetry_with_default_settings_stays_within_the_retention": 38,
    "tests/cli/test_ops.py::test_why_on_a_mapped_task_names_each_map_index": 33,
    "tests/fuzz/test_fuzz_cli.py::test_compare_with_hostile_arguments": 32,
    "tests/test_bench_smoke.py::test_paper_table_runs_and_checks_targets": 31,
    "tests/cli/test_model_transfer.py::test_a_fit_exported_from_one_store_starts_another": 23,
    "tests/fuzz/test_fuzz_cli.py::test_any_words_are_a_command_or_a_usage_error": 22,
    "tests/fuzz/test_fuzz_cli.py::test_simulate_with_hostile_arguments": 22,
    "tests/test_layering.py::test_the_scheduler_side_does_not_import_task_process_internals_at_import": 22,
    "tests/test_layering.py::test_code_that_runs_in_task_processes_cannot_reach_the_store": 20,
    "tests/store/test_store_url.py::test_unreachable_postgres_fails_the_tests_unless_skipped": 20,
    "tests/distributed/test_dispatch.py::test_an_unreachable_broker_ends_the_try_at_once": 19,
    "tests/test_bench_smoke.py::test_deep_queue_saves_a_digest_and_checks_a_run_against_it": 19,
    "tests/gpu/test_fence_check.py::test_fence_dry_run_passes_every_scenario_and_measures_the_context": 19,
    "tests/executor/test_writer.py::test_telemetry_older_than_the_retention_is_pruned_in_the_background": 18,
    "tests/fuzz/test_fuzz_workload.py::test_catalog_loads_consistently_or_is_a_workload_error": 17,
    "tests/ui/test_plugin.py::test_loading_the_plugin_does_not_import_fastapi": 17,
    "tests/test_bench_scarce_smoke.py::test_scarce_gpus_quick_prints_a_row_per_cell_and_the_summary": 16,
    "tests/fuzz/test_fuzz_task_config.py::test_gpu_task_validates_where_the_dag_is_written": 16,
    "tests/taskrun/test_framework_hook.py::test_real_torch_is_capped_after_transformers_probed_for_it": 15,
    "tests/distributed/test_hosts_cli.py::test_hosts_shows_which_host_is_live_and_what_runs_there": 14,
    "tests/cli/test_ops.py::test_model_with_nothing_learned_says_so_and_names_the_prior": 15,
    "tests/cli/test_ops.py::test_why_explains_waiting_and_placed_tasks": 14,
    "tests/taskrun/test_warm_frameworks.py::test_a_framework_asked_for_is_not_imported_and_is_named": 14,
    "tests/fuzz/test_fuzz_executor_intake.py::test_junk_executor_config_fails_that_task_only": 27,  # setup 12 + 14
    "tests/cli/test_model_speeds_cli.py::test_carma_model_shows_the_learned_ratio_and_the_prior_until_then": 14,
    "tests/cli/test_ops.py::test_gpus_on_a_narrow_terminal_fits_it_unless_wide": 13,
    "tests/test_security.py::test_well_formed_environments_pass_unchanged_and_can_be_set": 13,
    "tests/cli/test_ops.py::test_gpus_lists_every_gpu_with_its_tenants": 13,
    "tests/executor/test_writer.py::test_a_full_writer_pauses_placement_and_nothing_is_dropped": 12,
    "tests/cli/test_cli.py::test_arbitrary_gpu_and_policy_strings_never_traceback": 12,
    "tests/core/test_placer.py::test_interference_aware_never_overcommits": 11,
    "tests/test_layering.py::test_no_import_climbs_a_layer": 11,
    "tests/taskrun/test_warm_frameworks.py::test_a_framework_pulled_in_by_a_preloaded_module_is_named": 10,
    "tests/cli/test_model_transfer.py::test_an_import_keeps_a_fit_this_deployment_learned_unless_told": 10,
    "tests/monitor/test_testing.py::test_a_training_subprocess_holds_memory_the_probe_sees": 10,
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
