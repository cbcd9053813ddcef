"""The [carma] options: documented, listed by `airflow config list`, validated, env-settable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from carma_airflow.config.options import OPTIONS, options_markdown
from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_page_is_generated_from_the_options() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == options_markdown()


def test_airflow_config_list_shows_every_carma_option(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    env["AIRFLOW__CARMA__POLICY"] = "most-free-memory"
    airflow = str(Path(sys.executable).with_name("airflow"))
    out = subprocess.run(
        [airflow, "config", "list", "--section", "carma", "--show-values", "--include-descriptions"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for opt in OPTIONS:
        assert f"{opt.name} =" in out.stdout, opt.name
        assert opt.description.split(".")[0][:40] in out.stdout.replace("\n# ", " "), opt.name
    assert "policy = most-free-memory" in out.stdout  # AIRFLOW__CARMA__ variables are honoured


def test_settings_fill_defaults_and_reject_bad_values(tmp_path: Path) -> None:
    s = CarmaSettings.load(lambda name: None, str(tmp_path))
    assert s.store_url == f"sqlite:///{tmp_path / 'carma.db'}" and s.policy == "completion-time"
    with pytest.raises(ConfigError, match=r"\[carma\] sample_period = 'often' is not a valid float"):
        CarmaSettings.load(lambda name: "often" if name == "sample_period" else None, str(tmp_path))
    with pytest.raises(ConfigError, match="unknown policy"):
        CarmaSettings.load(lambda name: "fastest" if name == "policy" else None, str(tmp_path))
    with pytest.raises(ConfigError, match="gpu_backend"):
        CarmaSettings.load(lambda name: "cuda" if name == "gpu_backend" else None, str(tmp_path))


class _Conf:
    """An Airflow conf with only ``[carma]`` options set (``conf.get(section, key, fallback=)``)."""

    def __init__(self, **values: str) -> None:
        self.values = values

    def get(self, section: str, key: str, fallback: str | None = None) -> str | None:
        return self.values.get(key, fallback) if section == "carma" else fallback


@pytest.mark.parametrize("raw", [None, "", "  ", "/srv/carma-state", " /srv/padded "])
def test_the_state_dir_read_before_the_start_is_the_one_the_start_reads(
    raw: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the callbacks' results folder is made in __init__, before the settings are read in start()
    from carma_airflow.executor.flow import state_dir_of

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    conf = _Conf() if raw is None else _Conf(state_dir=raw)
    started = CarmaSettings.from_airflow(conf).state_dir
    assert state_dir_of(conf) == Path(started)
    assert started == ((raw or "").strip() or str(tmp_path / "carma"))


_BOTH_READINGS = """
import dataclasses, json, sys
from carma_airflow.config.settings import CarmaSettings
light = dataclasses.asdict(CarmaSettings.from_config_file())
imported = "airflow" in sys.modules
full = dataclasses.asdict(CarmaSettings.from_airflow())
print(json.dumps({"light": light, "full": full, "imported": imported}, default=str))
"""


@pytest.mark.parametrize("indirect", [False, True])
def test_the_clis_settings_are_airflows_without_importing_airflow(tmp_path: Path, indirect: bool) -> None:
    """`carma` commands read [carma] without importing Airflow (a second less per command): the
    same values Airflow's own configuration gives, from the file, from AIRFLOW__CARMA__ variables
    (which win), with $VARS and ~ expanded; an option given as _cmd is left to Airflow."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), CARMA_TEST_HOST="gpu-from-env", AIRFLOW__CARMA__POLICY="most-free-memory")
    lines = ["[carma]", "policy = exclusive", "host = $CARMA_TEST_HOST", "state_dir = ~/carma-state", "max_tenants = 3"]
    if indirect:
        lines.append("reserve_mib_cmd = echo 1234")
    (tmp_path / "airflow.cfg").write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [sys.executable, "-c", _BOTH_READINGS], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = __import__("json").loads(out.stdout.splitlines()[-1])
    assert got["light"] == got["full"]
    assert got["light"]["policy"] == "most-free-memory" and got["light"]["host"] == "gpu-from-env"
    assert got["light"]["state_dir"] == str(Path.home() / "carma-state") and got["light"]["max_tenants"] == 3
    assert got["imported"] is indirect  # Airflow only where it must do more than read


def test_min_gain_sets_the_floor_of_the_policies_that_have_one(tmp_path: Path) -> None:
    from carma_airflow.core.policies.completion_time import CompletionTime
    from carma_airflow.core.policies.predictive import Predictive
    from carma_airflow.executor.flow import configured_policy

    def settings(**values: str) -> CarmaSettings:
        return CarmaSettings.load(values.get, str(tmp_path))

    default = configured_policy(settings())
    assert isinstance(default, CompletionTime) and default.settings.min_gain is None  # no floor unless asked
    floored = configured_policy(settings(min_gain=" 0.3 ", max_tenants="2"))
    assert isinstance(floored, CompletionTime)
    assert floored.settings.min_gain == 0.3 and floored.max_tenants == 2
    assert floored.settings.caution == default.settings.caution  # the policy's other knobs stay
    predictive = configured_policy(settings(policy="predictive", min_gain="0.1"))
    assert isinstance(predictive, Predictive) and predictive.settings.min_gain == 0.1
    assert configured_policy(settings(policy="predictive")).settings.min_gain == 0.25  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"min_gain = 'a lot' is not a number; e\.g\. min_gain = 0\.3"):
        settings(min_gain="a lot")
    with pytest.raises(ConfigError, match=r"min_gain = '1\.5' is out of range"):
        settings(min_gain="1.5")
    with pytest.raises(ConfigError, match=r"policy = most-free-memory has no floor: remove min_gain or set"):
        settings(policy="most-free-memory", min_gain="0.3")


def test_learned_floor_sets_or_switches_off_the_floor_on_learned_gpu_models(tmp_path: Path) -> None:
    from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
    from carma_airflow.executor.flow import configured_policy

    def policy(**values: str) -> CompletionTime:
        got = configured_policy(CarmaSettings.load(values.get, str(tmp_path)))
        assert isinstance(got, CompletionTime)
        return got

    assert policy().settings.learned_floor == CompletionSettings().learned_floor == 0.0  # the policy's own
    assert policy(learned_floor=" OFF ").settings.learned_floor is None
    assert policy(learned_floor="0.2").settings.learned_floor == 0.2
    assert policy(learned_floor="0.2").settings.min_gain is None  # the other floor untouched


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"learned_floor": "some"}, r"learned_floor = 'some' is not a number or off; e\.g\. learned_floor"),
        ({"learned_floor": "-3"}, r"learned_floor = '-3' is out of range"),
        (
            {"policy": "predictive", "learned_floor": "off"},
            r"learned_floor = 'off' applies to the completion-time policy; policy =",
        ),
    ],
)
def test_a_bad_learned_floor_says_what_to_fix(tmp_path: Path, values: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        CarmaSettings.load(values.get, str(tmp_path))
