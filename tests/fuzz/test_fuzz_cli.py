"""The ``carma`` CLI with random and hostile arguments.

Whatever the arguments: exit code 0, or exit code 2 with exactly one line on stderr that starts
with ``error:``; never a Python traceback, never an exception out of the command.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from carma_airflow.cli import _register, app
from carma_airflow.core.estimators import estimator_names
from carma_airflow.core.gpu import GPU_CATALOGUE
from carma_airflow.core.policies import policy_names

_register()
FUZZ = settings.get_profile("carma-fuzz")
SLOW = settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 20))
runner = CliRunner()

CATALOG = (
    "task,family,batch_size,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes\n"
    "small,cnn,32,1,1000,1000,1000,8000,1\n"
    "pair,transformer,8,2,30000,,,,2\n"
)
FILES = {
    "catalog.csv": CATALOG,
    "trace.csv": "job_id,submit_s,task\n0,0,small\n1,5,pair\n2,9,small\n",
    "negative.csv": "job_id,submit_s,task\n0,-5,small\n",
    "unknown.csv": "job_id,submit_s,task\n0,0,teleport\n",
    "huge.csv": "task,family,batch_size,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes\n"
    "small,cnn,32,64,9007199254740992,,,,1e300\n",
    "header.csv": "job_id,submit_s,task\n",
    "empty.csv": "",
    "binary.csv": "\x00\xff\xfe\x00junk",
}


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths the fuzzer makes up (a --plot of 'x.png') land in tmp_path, not the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-cli")
    for name, text in FILES.items():
        (root / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    (root / "folder").mkdir()
    return root


def hostile(files: Path) -> st.SearchStrategy[str]:
    """Values that are wrong in every way an option can be: junk text, huge or negative numbers,
    paths that are folders, missing or malformed, option-like strings."""
    return st.one_of(
        st.text(max_size=20),
        st.text(alphabet="0123456789xX,-:. AHLTV", max_size=20),
        st.sampled_from(["", "-1", "0", "9" * 40, "-" + "9" * 30, "nan", "inf", "--json", "-", "--", "\x00", "a\nb"]),
        st.sampled_from(["synthetic:", "synthetic:0", "synthetic:-3", "synthetic:1e9", "synthetic:2", "synthetic:x"]),
        st.sampled_from([*sorted(FILES), "folder", "missing.csv", "folder/x.png"]).map(lambda n: str(files / n)),
        st.sampled_from(["/", "/dev/null", "/proc/self/mem", "t1"]),
        st.sampled_from(["1xA100-40GB", "2xA100-40GB,1xL4", "0xT4", "100000xT4", "99999999999xT4", "9" * 5000 + "xT4"]),
        st.sampled_from([*policy_names(), "static-0", "static--1", "static-999999999999999999999", "magm,,nope"]),
        st.sampled_from(list(GPU_CATALOGUE)),
    )


def plausible(files: Path, option: str) -> st.SearchStrategy[str]:
    """Values of the right kind for ``option``, often wrong in detail, so commands run deeper."""
    paths = lambda *names: st.sampled_from(names).map(lambda n: str(files / n))  # noqa: E731
    return {
        "--trace": paths("trace.csv", "negative.csv", "unknown.csv", "header.csv", "empty.csv", "binary.csv", "folder")
        | st.sampled_from(["t1", "synthetic:1", "synthetic:4", "synthetic:0", "synthetic:-2", "synthetic:1000001"]),
        "--catalog": paths("catalog.csv", "huge.csv", "binary.csv", "empty.csv", "trace.csv", "folder", "none.csv"),
        "--gpus": st.sampled_from(["1xA100-40GB", "2xA100-40GB,1xL4", "1xT4", "0xT4", "3x", "xT4", "1xa100-40gb "])
        | st.builds(lambda n, spec: f"{n}x{spec}", st.integers(-2, 6), st.sampled_from([*GPU_CATALOGUE, "B999"])),
        "--policy": st.sampled_from([*policy_names(), "static-0", "static-3", "static--1", "static-" + "9" * 30]),
        "--policies": st.lists(st.sampled_from([*policy_names(), "static-2", "nope", " ", ""]), max_size=4).map(
            ",".join
        ),
        "--estimator": st.sampled_from([*estimator_names(), "psychic", ""]),
        "--queue": st.sampled_from(["fifo", "backfill", "priority", "lifo", ""]),
        "--seed": st.integers(-(2**70), 2**70).map(str),
        "--plot": paths("out.png", "folder", "folder/x.png", "missing/x.png", "out.svg", "out.nope")
        | st.sampled_from(["/", "/dev/null", "/proc/x.png"]),
    }[option]


SIM_OPTIONS = ["--trace", "--catalog", "--gpus", "--policy", "--estimator", "--queue", "--seed"]
COMPARE_OPTIONS = ["--trace", "--catalog", "--gpus", "--policies", "--estimator", "--queue", "--seed", "--plot"]
FLAGS = ["--json", "--help", "--nope", "-x", "extra"]


@st.composite
def argv(draw: st.DrawFn, files: Path, command: str, options: list[str]) -> list[str]:
    args = [command, "--trace", "synthetic:3"]  # small by default; a fuzzed --trace comes later and wins
    for _ in range(draw(st.integers(1, 4))):
        roll = draw(st.integers(0, 19))
        if roll == 0:
            args.append(draw(st.sampled_from(FLAGS) | st.text(max_size=8)))
        else:
            option = draw(st.sampled_from(options))
            args += [option, draw(hostile(files) if roll < 5 else plausible(files, option))]
    if draw(st.integers(0, 19)) == 0:
        args.pop()  # an option left without its value
    return args


def check_result(args: list[str], exit_code: int, stdout: str, stderr: str, exception: BaseException | None) -> None:
    assert "Traceback" not in stdout + stderr, (args, stderr)
    assert exception is None or isinstance(exception, SystemExit), (args, exception)
    assert exit_code in (0, 2), (args, exit_code, stderr)
    if exit_code == 2 and not (args and args[-1] == "") and "--help" not in args:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, stderr)


def invoke(args: list[str], env: dict[str, str] | None = None) -> None:
    result = runner.invoke(app, args, env=env)
    check_result(args, result.exit_code, result.stdout, result.stderr, result.exception)


@SLOW
@given(st.data())
def test_simulate_with_hostile_arguments(files: Path, data: st.DataObject) -> None:
    invoke(data.draw(argv(files, "simulate", SIM_OPTIONS)))


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 10))  # the options simulate's fuzz covers too
@given(st.data())
def test_compare_with_hostile_arguments(files: Path, data: st.DataObject) -> None:
    invoke(data.draw(argv(files, "compare", COMPARE_OPTIONS)))


RUNS_SOMETHING = {"demo", "gpus", "placements", "why", "agent", "model"}  # start Airflow or processes: tested apart


@settings(FUZZ)
@given(
    st.lists(st.text(max_size=12) | st.sampled_from(["simulate", "compare", "--json", "--help", "-", "--"]), max_size=4)
)
def test_any_words_are_a_command_or_a_usage_error(words: list[str]) -> None:
    if words and words[0] in RUNS_SOMETHING:
        return
    if not words:  # ``carma`` alone: the help, as a usage error
        result = runner.invoke(app, [])
        assert result.exit_code == 2 and "Usage" in result.stdout
        return
    if words[0] in ("simulate", "compare") and "--trace" not in words:
        words = [*words, "--trace", "synthetic:2"]
    invoke(words)


@pytest.fixture
def airflow_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Settings for ``carma gpus/placements/why``: simulated GPUs, a SQLite store in tmp_path."""
    yield {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CARMA__GPU_BACKEND": "simulated",
        "AIRFLOW__CARMA__SIMULATED_GPUS": "2xA100-40GB",
        "AIRFLOW__CARMA__STORE_URL": f"sqlite:///{tmp_path / 'carma.db'}",
        "AIRFLOW__CARMA__STATE_DIR": str(tmp_path / "state"),
    }


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 8, 12))
@given(st.data())
def test_ops_commands_with_hostile_arguments(airflow_env: dict[str, str], files: Path, data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(["gpus", "placements", "why", "model"]))
    numbers = st.integers(-(2**70), 2**70).map(str) | st.sampled_from(["0", "-1", "1", "1000001", "9" * 30])
    maybe = st.booleans()
    args: list[str] = [command]
    if command == "placements":
        if data.draw(maybe):
            args += ["--dag-id", data.draw(hostile(files))]
        if data.draw(maybe):
            args += ["--limit", data.draw(numbers | hostile(files))]
    elif command == "why":
        args.append(data.draw(hostile(files) | st.sampled_from(["a.b", "dag.", ".task", "a.b\nc", "--json"])))
    if data.draw(maybe):
        args.append(data.draw(st.sampled_from(["--json", "--nope", "extra"])))
    invoke(args, env=airflow_env)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 8, 12))
@given(st.text(max_size=10) | st.sampled_from(["--keep=maybe", "--stop=1", "-k", "now"]))
def test_demo_with_junk_arguments_is_a_usage_error(junk: str) -> None:
    # junk that click cannot take, so the demo itself never starts
    args = ["demo", "--no-such-option", junk]
    result = runner.invoke(app, args)
    check_result(args, result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.exit_code == 2


def test_demo_stop_on_a_home_that_never_ran_a_demo(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--stop", "--home", str(tmp_path / "no-demo-here")])
    assert result.exit_code == 0 and "demo stopped" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--gpus", "9" * 5000 + "xT4"],
        ["simulate", "--nope"],
        ["why", "x"],
        ["compare", "--policies", "a\nb"],
    ],
)
def test_console_script_errors_are_one_line_without_traceback(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from carma_airflow.cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
