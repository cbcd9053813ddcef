"""Security properties (issue 5): no DAG or config value reaches a shell, the environment the
executor gives a task process is validated, database URLs are masked in messages."""

from __future__ import annotations

import ast
import os
import string
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carma_airflow
from carma_airflow.core.errors import ConfigError
from carma_airflow.core.recovery import plan_try_end
from carma_airflow.launching import check_cuda_visible_devices, check_task_env
from carma_airflow.store.url import mask_password
from carma_airflow.taskrun.outcome import end_plan_env

PACKAGE = Path(carma_airflow.__file__).parent
PROPS = settings(max_examples=200, deadline=None, derandomize=True, database=None)

# -- (a) no value reaches a shell ----------------------------------------------------------------

_SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}
_ALWAYS_SHELL = {
    "os.system",
    "os.popen",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "asyncio.create_subprocess_shell",
    "pty.spawn",
}
_CODE = {"eval", "exec", "compile"}


def _qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``subprocess.run`` for ``subprocess.run``, ``sp.run`` (import subprocess as sp) or ``run``
    (from subprocess import run); None for anything else."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _qualified(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def shell_risks(source: str, filename: str = "<src>") -> list[str]:
    """Every call in ``source`` through which a string could reach a shell or the interpreter."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                aliases[name.asname or name.name] = name.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for name in node.names:
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _qualified(node.func, aliases) or ""
        where = f"{filename}:{node.lineno}: {name}"
        if name in _ALWAYS_SHELL:
            found.append(f"{where} runs a shell")
        elif name.startswith("subprocess.") and name.split(".")[-1] in _SUBPROCESS:
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{where} with shell={ast.unparse(kw.value)}")
            if node.args and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp)):
                found.append(f"{where} with a command built as one string")
        elif name in _CODE or name in {f"builtins.{c}" for c in _CODE}:
            if not (node.args and isinstance(node.args[0], ast.Constant)):
                found.append(f"{where} on a non-literal")
        elif name.startswith("os.exec") or name.startswith("os.spawn"):
            shells = {"sh", "bash", "/bin/sh", "/bin/bash", "zsh", "dash"}
            if any(isinstance(a, ast.Constant) and a.value in shells for a in node.args):
                found.append(f"{where} starts a shell")
    return found


def test_the_shell_scan_finds_what_it_looks_for() -> None:
    bad = """
import os, subprocess as sp
from subprocess import run
from os import system as s
sp.run(cmd, shell=True)
run(f"ls {path}", check=True)
sp.Popen(args, shell=flag)
s("rm -rf " + d)
os.popen(cmd)
eval(expression)
exec(compile(code, "x", "exec"))
os.execvp("sh", ["sh", "-c", cmd])
"""
    risks = shell_risks(bad)
    assert len(risks) == 9, risks
    good = """
import subprocess, os
subprocess.run(["airflow", *args], shell=False, check=True)
subprocess.Popen([exe, "-c", code], env=env)
os.execvp(exe, [exe, *args])
eval("1 + 1")
"""
    assert shell_risks(good) == []


def test_no_value_from_a_dag_or_a_config_reaches_a_shell() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20  # the package itself, not an empty folder
    risks = [r for f in files for r in shell_risks(f.read_text(encoding="utf-8"), str(f.relative_to(PACKAGE)))]
    assert risks == []


# -- (b) the task environment is validated ---------------------------------------------------------

names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,30}\Z")
safe_values = st.text(st.characters(blacklist_characters="\x00\n\r", blacklist_categories=("Cs",)), max_size=60)
hexes = st.text("0123456789abcdef", min_size=1, max_size=12)
gpu_uuids = st.builds(lambda parts: "GPU-" + "-".join(parts), st.lists(hexes, min_size=1, max_size=5))
devices = st.one_of(
    st.integers(0, 9999).map(str),
    gpu_uuids,
    gpu_uuids.map(lambda u: "MIG-" + u[4:]),
    st.builds(lambda u, g, c: f"MIG-{u}/{g}/{c}", gpu_uuids, st.integers(0, 14), st.integers(0, 7)),
    st.integers(0, 9999).map(lambda i: f"GPU-SIM-{i:04d}"),
)
device_lists = st.lists(devices, unique=True, max_size=8).map(",".join)


@PROPS
@given(st.dictionaries(names, safe_values, max_size=6), device_lists)
def test_well_formed_environments_pass_unchanged_and_can_be_set(env: dict[str, str], cuda: str) -> None:
    env = {**env, "CUDA_VISIBLE_DEVICES": cuda}
    checked = check_task_env(env)
    assert checked == env and checked is not env
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(checked)  # what the task process does first; raises on NUL or bad encoding
        assert all(os.environ[k] == v for k, v in checked.items())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@PROPS
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=5))
def test_any_environment_is_passed_whole_or_refused(env: dict[str, str]) -> None:
    try:
        checked = check_task_env(env)
    except ConfigError as exc:
        assert len(str(exc).splitlines()) == 1
    else:
        assert checked == env
        for key, value in checked.items():
            assert key and key[0] in string.ascii_letters + "_"
            assert all(c in string.ascii_letters + string.digits + "_" for c in key)
            assert not {"\x00", "\n", "\r"} & set(value)


@PROPS
@given(device_lists, st.sampled_from([" ", "\n", ";", "$(id)", "`id`", "&&", "|", "..", "*", "\x00", "=", "\u0663"]))
def test_cuda_visible_devices_takes_ids_only(devices_text: str, junk: str) -> None:
    assert check_cuda_visible_devices(devices_text) == devices_text
    hostile = [junk, f"{devices_text}{junk}", f"{junk},{devices_text}", f"{devices_text},{junk}"]
    for value in hostile:
        if value.strip(",") and value != devices_text:
            with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES"):
                check_task_env({"CUDA_VISIBLE_DEVICES": value})


@PROPS
@given(device_lists.filter(bool))
def test_a_gpu_named_twice_is_refused(devices_text: str) -> None:
    first = devices_text.split(",", maxsplit=1)[0]
    with pytest.raises(ConfigError, match="twice"):
        check_cuda_visible_devices(f"{devices_text},{first}")


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"1BAD": "x"}, "not a variable name"),
        ({"A=B": "x"}, "not a variable name"),
        ({"": "x"}, "not a variable name"),
        ({"PATH\x00": "x"}, "not a variable name"),
        ({"CARMA_PLACEMENT": "a\nb"}, "holds"),
        ({"CARMA_PLACEMENT": "a\x00b"}, "holds"),
        ({"CARMA_PLACEMENT": "\ud800"}, "not encodable"),
        ({"CARMA_PLACEMENT": "x" * 40_000}, "32 KiB"),
        ({"CARMA_PLACEMENT": 3}, "must be a str"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-1, GPU-2"}, "not a GPU index"),
        ({"CUDA_VISIBLE_DEVICES": "0,,1"}, "not a GPU index"),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, "not a GPU index"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-"}, "not a GPU index"),
    ],
)
def test_bad_environment_entries_are_named(env: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        check_task_env(env)  # type: ignore[arg-type]


def test_what_the_executor_sets_today_passes() -> None:
    env = {
        "CUDA_VISIBLE_DEVICES": "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-SIM-0001",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CARMA_RESULT_FILE": "/home/airflow/carma/results/0192.json",
        "CARMA_PLACEMENT": "placed on GPU 0 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none",
        "CARMA_END_PLAN": end_plan_env(plan_try_end(2, None, 1, 2, 1))["CARMA_END_PLAN"],
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "CARMA_CONFIG_ERROR": "task 't': executor_config['carma']['gpus']: must be a whole number (got True); write 2",
    }
    assert check_task_env(env) == env
    assert check_task_env({"CUDA_VISIBLE_DEVICES": ""}) == {"CUDA_VISIBLE_DEVICES": ""}  # a task without GPUs


# -- (c) database URLs are masked ------------------------------------------------------------------

url_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
hosts = st.from_regex(r"\A[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?(:[0-9]{1,5})?\Z")
schemes = st.sampled_from(["postgresql", "postgresql+psycopg", "mysql+pymysql", "sqlite", "redis"])


@PROPS
@given(schemes, url_text | st.just(""), url_text, hosts, st.from_regex(r"\A[A-Za-z0-9_]{0,12}\Z"))
def test_a_url_quoted_password_never_appears_in_the_masked_url(
    scheme: str, user: str, password: str, host: str, db: str
) -> None:
    head = f"{scheme}://{quote(user, safe='')}:"
    url = f"{head}{quote(password, safe='')}@{host}/{db}"
    masked = mask_password(url)
    assert masked == f"{head}***@{host}/{db}"
    # in a message too, next to other text
    line = f"cannot connect to {url} (timeout)"
    assert mask_password(line) == f"cannot connect to {head}***@{host}/{db} (timeout)"


@PROPS
@given(schemes, url_text, url_text, hosts, url_text)
def test_an_at_sign_after_the_password_only_masks_more(
    scheme: str, user: str, password: str, host: str, query: str
) -> None:
    url = f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}/db?x={quote(query, safe='@')}@y"
    # masked up to the last "@": the password and everything after it up to there is gone
    assert mask_password(url) == f"{scheme}://{quote(user, safe='')}:***@y"


def test_a_raw_space_in_a_password_is_masked() -> None:
    assert "pa ss" not in mask_password("postgresql://u:pa ss@h/db")
