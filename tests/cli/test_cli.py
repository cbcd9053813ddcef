"""The ``carma`` CLI: JSON contract, policy aliases, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from carma_airflow.cli import app, main

main  # noqa: B018  (the console-script entry point must exist)
from carma_airflow.cli import _register  # noqa: E402

_register()
runner = CliRunner()
REQUIRED = {
    "policy",
    "estimator",
    "queue",
    "gpus",
    "tasks",
    "completed",
    "lost",
    "oom_crashes",
    "retries",
    "makespan_s",
    "mean_wait_s",
    "p95_wait_s",
    "mean_jct_s",
    "sm_activity_mean",
    "sm_occupancy_mean",
    "memory_used_mean",
    "energy_kwh",
}


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_simulate_json_has_the_contract_keys_and_defaults() -> None:
    code, out, _ = run("simulate", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) >= REQUIRED
    assert data["policy"] == "completion-time"
    assert data["estimator"] == "history+floor"  # the executor's default (issue 41)
    assert data["queue"] == "backfill"
    assert data["tasks"] == 60 and data["completed"] + data["lost"] == 60
    for key in ("sm_activity_mean", "sm_occupancy_mean", "memory_used_mean"):
        assert 0.0 < data[key] <= 1.0


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("magm", "most-free-memory"),
        ("lug", "least-utilised"),
        ("ff", "first-fit"),
        ("bf", "best-fit"),
        ("rr", "round-robin"),
    ],
)
def test_paper_short_names_are_aliases(alias: str, name: str) -> None:
    code, out, _ = run("simulate", "--policy", alias, "--estimator", "oracle", "--queue", "fifo", "--json")
    assert code == 0
    assert json.loads(out)["policy"] == name


def test_simulate_uses_given_trace_catalog_and_gpu_list(tmp_path: Path) -> None:
    catalog = tmp_path / "cat.csv"
    catalog.write_text(
        "task,family,batch_size,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes\n"
        "small,cnn,32,1,1000,1000,1000,8000,1\n"
    )
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_s,task\n0,0,small\n1,5,small\n2,9,small\n")
    code, out, _ = run(
        "simulate", "--trace", str(trace), "--catalog", str(catalog), "--gpus", "1xL4,1xH100-80GB", "--json"
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["tasks"] == 3 and data["completed"] == 3
    assert data["gpus"] == "1xL4,1xH100-80GB"


def test_compare_json_ratios_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "cmp.png"
    code, out, _ = run("compare", "--policies", "magm,carma,static-2", "--json", "--plot", str(png))
    assert code == 0
    rows = json.loads(out)
    assert [r["policy"] for r in rows] == ["exclusive", "most-free-memory", "interference-aware", "static-2"]
    assert rows[0]["makespan_s_ratio"] == 1.0
    assert all(0 < r["makespan_s_ratio"] < 1.0 for r in rows[1:])  # collocation helps on this trace
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["simulate", "--trace", "/no/such/file.csv"], "not found"),
        (["simulate", "--gpus", "4xB999"], "unknown GPU spec"),
        (["simulate", "--gpus", "fourxA100"], "NxSPEC"),
        (["simulate", "--policy", "smartest"], "unknown policy"),
        (["simulate", "--estimator", "psychic"], "unknown estimator"),
        (["simulate", "--queue", "lifo"], "unknown queue"),
        (["simulate", "--trace", "synthetic:lots"], "synthetic:N"),
        (["compare", "--policies", "magm,nope"], "unknown policy"),
        (["compare", "--policies", " , "], "--policies is empty"),
        (["compare", "--plot", "/no/such/dir/x.png"], "does not exist"),
        (["simulate", "--interference-beta", "-0.1"], "--interference-beta must be a finite number >= 0"),
        (["simulate", "--interference-beta", "strong"], "--interference-beta must be a number >= 0"),
        (["compare", "--activity-scale", "inf"], "--activity-scale must be a finite number >= 0"),
        (["compare", "--activity-scale", "-1"], "--activity-scale must be a finite number >= 0"),
        (["simulate", "--activity-scale", "half"], "--activity-scale must be a number >= 0"),
        (["simulate", "--estimator", "history", "--warm-runs", "-1"], "--warm-runs must be a whole number"),
        (["simulate", "--estimator", "history", "--warm-runs", "two"], "--warm-runs must be a whole number"),
        (["simulate", "--estimator", "gpumemnet", "--warm-runs", "1"], "--warm-runs needs an estimator that learns"),
        (["simulate", "--warm-learning"], "--warm-learning needs --warm-runs 1 or more"),
        (["simulate", "--truth", "gaussian"], "--truth: truth 'gaussian': one of sharing"),
        (["simulate", "--min-gain", "1.5"], "--min-gain must be a number between -1 and 1"),
        (["simulate", "--min-gain", "some"], "--min-gain must be a number between -1 and 1"),
        (["simulate", "--policy", "exclusive", "--min-gain", "0.3"], "--min-gain applies to the completion-time"),
        (["compare", "--truth", "types:x"], "--truth: truth 'types:x'"),
        (["simulate", "--truth", "pairs:/no/such/pairs.csv"], "--truth: "),
    ],
)
def test_bad_input_gives_one_line_error_and_nonzero_exit(args: list[str], fragment: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in out + err


def test_the_simulated_truth_is_an_option() -> None:
    def slowdown(*args: str) -> float:
        code, out, err = run("simulate", "--policy", "magm", "--queue", "fifo", "--json", *args)
        assert code == 0, err
        return float(json.loads(out)["mean_slowdown"])

    today = slowdown()
    assert slowdown("--interference-beta", "0.5", "--activity-scale", "1") == today  # the defaults
    assert slowdown("--interference-beta", "0.1") < today < slowdown("--interference-beta", "0.8")
    assert slowdown("--activity-scale", "0.6") < today
    code, out, _ = run("compare", "--policies", "magm", "--interference-beta", "0.8", "--json")
    assert code == 0 and len(json.loads(out)) == 2
    assert slowdown("--truth", "sharing") == today
    assert slowdown("--truth", "types:1") != today  # per task type sensitivity and pressure
    assert slowdown("--truth", "types:1") == slowdown("--truth", "types:1")  # seeded


def test_warm_runs_fill_the_learned_memory_first() -> None:
    def ooms(*args: str) -> int:
        # the paper's policy, unfenced, collocates maskrcnn where its underestimate OOMs (completion-time,
        # or a fence that keeps each tenant's promise, places it where it does not, so the cold run would
        # prove nothing about warm runs)
        code, out, err = run(
            "simulate",
            "--trace",
            "t2",
            "--estimator",
            "history",
            "--policy",
            "interference-aware",
            "--isolation",
            "none",
            "--json",
            *args,
        )
        assert code == 0, err
        return int(json.loads(out)["oom_crashes"])

    assert ooms() >= 1  # maskrcnn's first try: GPUMemNet's 8,000 MiB
    assert ooms("--warm-runs", "1") == 0  # its peak learned the day before


def test_a_second_day_starts_from_what_the_first_taught_of_speed_too() -> None:
    def summary(*extra: str) -> dict[str, object]:
        code, out, err = run("simulate", "--trace", "t1", "--interference-beta", "0.5", "--json", *extra)
        assert code == 0, err
        return dict(json.loads(out))

    memory_only = summary("--estimator", "history", "--warm-runs", "1")
    learned = summary("--estimator", "history", "--warm-runs", "1", "--warm-learning")
    assert learned != memory_only  # activities, run times and the fit change the decisions
    # with an estimator that learns no memory, --warm-learning alone carries what was learned
    assert summary("--warm-runs", "1", "--warm-learning") != summary()


def test_a_simulation_replays_the_floor_the_executor_would_set() -> None:
    def summary(*extra: str) -> dict[str, object]:
        code, out, err = run("simulate", "--trace", "t1", "--interference-beta", "0.5", "--json", *extra)
        assert code == 0, err
        return dict(json.loads(out))

    plain, floored = summary(), summary("--min-gain", "0.3")
    assert plain["policy"] == "completion-time" and floored["policy"] == "completion-time (min_gain 0.3)"
    assert floored["completed"] == plain["completed"] == 60
    assert floored["mean_jct_s"] != plain["mean_jct_s"]  # collocations refused: another schedule


def test_malformed_and_inconsistent_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\x00\xff\xfe garbage \x00")
    code, _, err = run("simulate", "--trace", str(bad))
    assert code == 2 and err.startswith("error: ")
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("job_id,submit_s,task\n0,0,teleport_net\n")
    code, _, err = run("simulate", "--trace", str(unknown))
    assert code == 2 and "unknown task type 'teleport_net'" in err


IMPOSSIBLE_CATALOG = (
    "task,family,batch_size,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes\n"
    "small,cnn,32,1,1000,1000,1000,1000,1\n"
    "huge,transformer,8,8,1000,1000,1000,1000,1\n"
    "fat,transformer,8,1,60000,60000,60000,60000,1\n"
)


def console_script(*args: str) -> subprocess.CompletedProcess[str]:
    """``carma ARGS`` through the console-script entry point (``carma_airflow.cli:main``)."""
    return subprocess.run(
        [sys.executable, "-c", "from carma_airflow.cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_impossible_task_is_an_error_line_and_exit_2(tmp_path: Path, json_flag: list[str]) -> None:
    catalog = tmp_path / "cat.csv"
    catalog.write_text(IMPOSSIBLE_CATALOG)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,task\n0,0,small\n7,5,huge\n")
    proc = console_script("simulate", "--trace", str(trace), "--catalog", str(catalog), *json_flag)
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: trace job 7 (task huge) can never run on 4xA100-40GB: asks for 8 GPUs but the largest host "
        "has 4 matching GPUs; change the task in the catalogue or trace, or simulate GPUs that can hold it (--gpus)"
    ]


def test_task_too_big_for_every_gpu_names_its_memory_and_counts_the_others(tmp_path: Path) -> None:
    catalog = tmp_path / "cat.csv"
    catalog.write_text(IMPOSSIBLE_CATALOG)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,task\n0,0,fat\n1,5,small\n2,9,huge\n")
    proc = console_script("simulate", "--trace", str(trace), "--catalog", str(catalog), "--estimator", "oracle")
    assert proc.returncode == 2, proc
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: trace job 0 (task fat) can never run on 4xA100-40GB: needs 58.6 GiB per GPU")
    assert "(and 1 more task that can never fit)" in line
    cmp = console_script("compare", "--trace", str(trace), "--catalog", str(catalog), "--policies", "magm")
    assert cmp.returncode == 2 and cmp.stderr.startswith("error: trace job 0 (task fat) can never run"), cmp


def test_console_script_prints_no_traceback_on_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from carma_airflow.cli import main; main()", "simulate", "--gpus", "2xNOPE"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown GPU spec 'NOPE'")
    assert "Traceback" not in proc.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.text(max_size=30), policy=st.text(max_size=20))
def test_arbitrary_gpu_and_policy_strings_never_traceback(gpus: str, policy: str) -> None:
    result = runner.invoke(app, ["simulate", "--gpus", gpus, "--policy", policy, "--trace", "synthetic:5", "--json"])
    assert result.exit_code in (0, 2)
    if result.exit_code == 2:
        assert "Traceback" not in result.stderr
        assert result.exception is None or isinstance(result.exception, SystemExit)
