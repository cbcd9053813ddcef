"""What the docs state about a default is the code's number: change one and this fails until the
other follows (the prior, the override rule, the memory history, policy names, option defaults)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from carma_airflow.config.options import OPTIONS, option_default
from carma_airflow.config.settings import parse_duration
from carma_airflow.core.estimators import OUTGROWN_RUNS, OUTGROWN_TOLERANCE, History, TaskMemoryInfo, outgrown_peaks
from carma_airflow.core.interference_estimate import DEFAULT_INTERFERENCE_SETTINGS as PRIOR
from carma_airflow.core.policies import DEFAULT_POLICY, policy_names
from carma_airflow.core.policies.completion_time import CompletionSettings

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _text(name: str) -> str:
    return " ".join((DOCS / name).read_text().split())  # a sentence may break over lines


def test_the_override_rule_is_the_estimators() -> None:
    text = _text("authoring.md")
    assert f"each of its last {OUTGROWN_RUNS} successful runs" in text
    assert f"peaked more than {round(OUTGROWN_TOLERANCE * 100)} % above the declaration" in text
    # "its only one, while it has one": a task with one run that outgrew it is overridden already
    assert "its only one, while it has one" in text
    assert outgrown_peaks(TaskMemoryInfo(declared_mib=8192, history_mib=(30000,))) == (30000,)


def test_the_memory_history_is_the_estimators() -> None:
    history, text = History(), _text("authoring.md")
    margin = round(history.margin * 100)
    assert f"largest peak of the task's last {history.runs} successful runs, plus {margin} %, rounded up to" in text
    assert f"rounded up to {history.round_mib} MiB" in text
    assert f"`[carma] floor_mib` ({option_default('floor_mib')} MiB)" in text


def test_the_interference_prior_is_the_models() -> None:
    text = _text("ui.md")
    assert f"uses the prior (beta {PRIOR.cold_beta:.2f}, k {PRIOR.prior_scale:.2f})" in text
    assert f"it moves after {PRIOR.min_observations} collocated tries" in text


def test_policy_names_and_the_default_are_the_codes() -> None:
    policy = next(o for o in OPTIONS if o.name == "policy")
    assert policy.default == DEFAULT_POLICY
    assert f"{DEFAULT_POLICY} (default)" in policy.description
    rows = [line for line in (DOCS / "policies.md").read_text().splitlines() if line.startswith("| `")]
    for name in policy_names():
        assert name in policy.description, name
        assert any(f"`{name}`" in row.split(" | ")[0] for row in rows), name  # each policy has its row
    assert f"policy = {DEFAULT_POLICY}" in (DOCS / "policies.md").read_text()


_UNITS = {"": 1.0, "s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "days": 86400.0, "MiB": 1.0}
_STATED = re.compile(r"`\[carma\] (\w+)` \((?:default )?(\d+(?:\.\d+)?) ?(s|min|h|days?|MiB)?\)")
_STATED_AS = re.compile(r"`\[carma\] (\w+) = ([\w.-]+)`,? \(?the default")


def _base(name: str, raw: str) -> float | str:
    opt = next(o for o in OPTIONS if o.name == name)
    if name == "telemetry_retention":
        return parse_duration(raw, name)
    return float(raw) if opt.type in ("integer", "float") else raw.strip().lower()


def _stated() -> list[tuple[str, str, float | str]]:
    found = []
    for page in sorted([*DOCS.glob("*.md"), DOCS.parent / "README.md"]):
        text = " ".join(page.read_text().split())
        for name, number, unit in _STATED.findall(text):
            found.append((page.name, name, float(number) * _UNITS[unit or ""]))
        for name, value in _STATED_AS.findall(text):
            found.append((page.name, name, value.lower()))
    return found


def test_docs_state_some_option_defaults() -> None:
    assert len(_stated()) >= 15  # the pattern still finds what the docs state


@pytest.mark.parametrize(("page", "name", "value"), _stated(), ids=str)
def test_every_option_default_a_doc_states_is_the_options(page: str, name: str, value: float | str) -> None:
    assert name in {o.name for o in OPTIONS}, f"{page} names [carma] {name}, which is no option"
    default = next(o for o in OPTIONS if o.name == name).default
    assert _base(name, default) == value, f"{page}: [carma] {name} stated as {value}, the default is {default!r}"


def test_isolation_first_screen_says_what_the_default_holds_and_lets_through() -> None:
    from carma_airflow.core.fencing import DEFAULT_CAP_RULE
    from carma_airflow.core.grown import grown_line

    first_screen = " ".join((DOCS / "isolation.md").read_text().splitlines()[:12])
    assert f"by default (`isolation_cap = {DEFAULT_CAP_RULE.value}`)" in first_screen
    assert "without being stopped" in first_screen
    said = grown_line("success", 30720, 8192, declared=True)
    assert said is not None and f"`{said.split(': ')[0]}: ...`" in first_screen  # the words `carma why` uses


def test_the_tasks_test_warning_is_airflows_behaviour() -> None:
    import inspect

    from airflow.cli.commands import task_command
    from airflow.models import dagrun

    # docs/troubleshooting.md: without a date, `airflow tasks test` replaces a run whose logical date is
    # empty (it deletes it) and deletes its own temporary run afterwards; a later Airflow may change this
    replaced = inspect.getsource(dagrun.get_or_create_dagrun)
    assert "DagRun.logical_date == logical_date" in replaced and "session.delete(dr)" in replaced
    assert 'create_if_necessary="db"' in inspect.getsource(task_command.task_test)
    text = _text("troubleshooting.md")
    assert "## Testing a GPU task locally" in (DOCS / "troubleshooting.md").read_text()
    assert "checkpoint_dir(default=" in text and "airflow tasks test my_dag train 2026-01-01" in text


def test_the_learned_floor_is_the_policys() -> None:
    text = _text("placement.md")
    assert f"(`CompletionSettings.learned_floor`, default {CompletionSettings().learned_floor}; " in text
    assert f"under the {CompletionSettings().learned_floor:.2f} a collocation must add: refused" in text
