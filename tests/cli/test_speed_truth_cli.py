"""``carma simulate --speed-truth`` and ``carma compare --speed-truth``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from carma_airflow.cli import _register, app

_register()
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_spec_speed_truth_slows_the_slower_models_and_alike_changes_nothing() -> None:
    def makespan(*extra: str) -> float:
        code, out, err = run("simulate", "--gpus", "2xA100-80GB,2xV100-32GB", "--json", *extra)
        assert code == 0, err
        return float(json.loads(out)["makespan_s"])

    today = makespan()
    assert makespan("--speed-truth", "alike") == today
    assert makespan("--speed-truth", "spec:1") > today  # the V100s run slower than the trace's solo times
    code, _out, err = run("compare", "--policies", "magm", "--speed-truth", "spec", "--json")
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["simulate", "--speed-truth", "quick"], "--speed-truth: speed truth 'quick': one of alike"),
        (["compare", "--speed-truth", "spec:x"], "--speed-truth: speed truth 'spec:x'"),
        (["simulate", "--speed-truth", "table:/no/such/solo.csv"], "--speed-truth: "),
    ],
)
def test_a_bad_speed_truth_is_one_error_line(args: list[str], fragment: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert "Traceback" not in out + err
