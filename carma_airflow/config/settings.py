"""The settings of the ``[carma]`` section, read once, validated: :class:`CarmaSettings`.

The options themselves (names, types, defaults, descriptions) are one table in
:mod:`carma_airflow.config.options`; :meth:`CarmaSettings.from_airflow` reads each from Airflow's
configuration (so also as ``AIRFLOW__CARMA__<OPTION>``), fills the defaults that depend on the
host and on ``AIRFLOW_HOME``, and validates the values together.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.config.options import OPTIONS, parse_value
from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import DEFAULT_CAP_RULE
from carma_airflow.core.policies.floor import FLOORED_POLICIES
from carma_airflow.store.url import default_url


def _airflow_home() -> str:
    return os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")  # as Airflow finds its home


_ENV = "AIRFLOW__CARMA__"


def _expand(value: str) -> str:
    """``~`` and ``$VARS`` expanded until nothing changes (Airflow's ``expand_env_var``)."""
    while True:
        expanded = os.path.expanduser(os.path.expandvars(value))
        if expanded == value:
            return value
        value = expanded


def default_state_dir(airflow_home: str | None = None) -> str:
    """``[carma] state_dir`` when it is empty: ``carma`` under ``airflow_home`` (None: Airflow's)."""
    return str(Path(airflow_home or _airflow_home()) / "carma")


@dataclass(frozen=True, slots=True)
class CarmaSettings:
    """The ``[carma]`` section as typed values: one field per option of
    :data:`~carma_airflow.config.options.OPTIONS`."""

    gpu_backend: str
    simulated_gpus: str
    sample_period: float
    policy: str
    queue: str
    estimator: str
    store_url: str
    state_dir: str
    oom_retries: int
    oom_retry_delay: float
    reserve_mib: int
    headroom_mib: int
    floor_mib: int
    lock_seconds: float
    max_tenants: int
    starvation_seconds: float
    framework_guards: bool
    stale_seconds: float
    strict_validation: bool
    host: str
    dispatch: str
    fault_kill_seconds: float
    snapshot_period: float
    host_timeout_seconds: float
    queue_prefix: str
    max_waiting: int = 1024
    isolation: str = "auto"
    isolation_margin_mib: int = 2048
    isolation_cap: str = DEFAULT_CAP_RULE.value  # measured per mechanism: bench/fencing.py, docs/isolation.md
    schedulers: str = "auto"
    peer_timeout_seconds: float = 30.0
    checkpoint_root: str = ""
    checkpoint_keep: bool = False
    telemetry_retention: str = "7d"
    min_gain: str = ""
    learned_floor: str = ""
    allow_unknown_keys: bool = False
    nvml_detail_every: int = 5

    @property
    def min_gain_value(self) -> float | None:
        """``min_gain`` as a number; None: empty (the policy's own floor)."""
        text = self.min_gain.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(
                f"[carma] min_gain = {self.min_gain!r} is not a number; e.g. min_gain = 0.3 (empty: the policy's own)"
            ) from None
        if not -1.0 <= value <= 1.0:
            raise ConfigError(
                f"[carma] min_gain = {self.min_gain!r} is out of range: a gain in summed speed (solo = 1.0 per "
                "task) between -1 and 1, e.g. min_gain = 0.3"
            )
        return value

    @property
    def learned_floor_value(self) -> tuple[bool, float | None]:
        """``learned_floor`` as (set, the floor): (False, None) empty (the policy's own, 0.0),
        (True, None) ``off``, else (True, the number)."""
        text = self.learned_floor.strip().lower()
        if not text:
            return False, None
        if text == "off":
            return True, None
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(
                f"[carma] learned_floor = {self.learned_floor!r} is not a number or off; e.g. learned_floor = 0.0 "
                "(empty: the policy's own)"
            ) from None
        if not -1.0 <= value <= 1.0:
            raise ConfigError(
                f"[carma] learned_floor = {self.learned_floor!r} is out of range: a gain in summed speed (solo = 1.0 "
                "per task) between -1 and 1, or off"
            )
        return True, value

    @property
    def telemetry_retention_s(self) -> float | None:
        """``telemetry_retention`` in seconds; None: kept for ever (0)."""
        seconds = parse_duration(self.telemetry_retention, "telemetry_retention")
        return seconds if seconds > 0 else None

    @classmethod
    def load(cls, get: Callable[[str], str | None], airflow_home: str) -> CarmaSettings:
        """Read every option through ``get(name)`` (None = unset), fill defaults, validate."""
        values: dict[str, Any] = {}
        for opt in OPTIONS:
            raw = get(opt.name)
            values[opt.name] = parse_value(opt, opt.default if raw is None else raw)
        home = Path(airflow_home)
        if not values["store_url"]:
            values["store_url"] = default_url(str(home))
        if not values["state_dir"]:
            values["state_dir"] = default_state_dir(str(home))
        if not values["checkpoint_root"]:
            values["checkpoint_root"] = str((Path(values["state_dir"]) / "checkpoints").absolute())
        if not values["host"]:
            values["host"] = socket.gethostname()
        for name in ("isolation", "isolation_cap"):  # "MPS " is mps; a value of neither vocabulary: validate
            values[name] = str(values[name]).strip().lower()
        settings = cls(**values)
        settings.validate()
        return settings

    @classmethod
    def from_airflow(cls, conf: Any = None) -> CarmaSettings:
        """From Airflow's configuration; ``conf``: an executor's team-aware ``ExecutorConf``
        (multi-team deployments), else Airflow's global one."""
        if conf is None:
            from airflow.configuration import conf

        def get(name: str) -> str | None:
            value = conf.get("carma", name, fallback=None)
            return None if value is None else str(value)

        return cls.load(get, _airflow_home())

    @classmethod
    def from_config_file(cls) -> CarmaSettings:
        """``[carma]`` as Airflow reads it, without importing Airflow (about 1.5 s of CPU less at
        each start of a ``carma`` command): ``AIRFLOW__CARMA__<OPTION>``, else the option in
        ``$AIRFLOW_CONFIG`` (or ``$AIRFLOW_HOME/airflow.cfg``), each with ``~`` and ``$VARS``
        expanded as Airflow does.  Where Airflow would do more than that (an option given as
        ``_cmd`` or ``_secret``, a value with ``%`` interpolation) Airflow itself reads them."""
        import configparser

        home = _airflow_home()
        path = Path(os.environ.get("AIRFLOW_CONFIG") or Path(home) / "airflow.cfg")
        section: dict[str, str] = {}
        if path.is_file():
            parser = configparser.RawConfigParser()
            try:
                parser.read(path, encoding="utf-8")
            except configparser.Error:
                return cls.from_airflow()  # Airflow's own message for a broken file
            if parser.has_section("carma"):
                section = dict(parser.items("carma"))
        env = {k[len(_ENV) :].lower(): v for k, v in os.environ.items() if k.startswith(_ENV)}
        indirect = any(k.endswith(("_cmd", "_secret")) for k in (*env, *section))
        if indirect or any("%" in v for v in section.values()):
            return cls.from_airflow()

        def get(name: str) -> str | None:
            value = env.get(name, section.get(name))
            return None if value is None else _expand(value)

        return cls.load(get, home)

    def validate(self) -> None:
        from carma_airflow.core.estimators import make_estimator
        from carma_airflow.core.gpu import parse_gpu_list
        from carma_airflow.core.policies import make_policy
        from carma_airflow.core.queueing import make_queue

        if self.gpu_backend not in ("nvml", "simulated"):
            raise ConfigError(f"[carma] gpu_backend = {self.gpu_backend!r}; use nvml or simulated")
        if self.gpu_backend == "simulated":
            parse_gpu_list(self.simulated_gpus)
        policy = make_policy(self.policy)
        if self.min_gain_value is not None and policy.name not in FLOORED_POLICIES:
            raise ConfigError(
                f"[carma] min_gain = {self.min_gain!r} applies to the {' and '.join(FLOORED_POLICIES)} policies; "
                f"policy = {self.policy} has no floor: remove min_gain or set policy = completion-time"
            )
        if self.learned_floor_value[0] and policy.name != "completion-time":
            raise ConfigError(
                f"[carma] learned_floor = {self.learned_floor!r} applies to the completion-time policy; "
                f"policy = {self.policy} has none: remove learned_floor or set policy = completion-time"
            )
        make_queue(self.queue)
        make_estimator(self.estimator)
        if self.dispatch not in ("local", "celery"):
            raise ConfigError(f"[carma] dispatch = {self.dispatch!r}; use local or celery")
        for name in (
            "sample_period",
            "oom_retry_delay",
            "lock_seconds",
            "starvation_seconds",
            "stale_seconds",
            "fault_kill_seconds",
            "snapshot_period",
            "host_timeout_seconds",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"[carma] {name} must be > 0")
        for name in ("reserve_mib", "headroom_mib", "floor_mib", "oom_retries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"[carma] {name} must be >= 0")
        if self.max_tenants < 1:
            raise ConfigError("[carma] max_tenants must be >= 1")
        if self.nvml_detail_every < 1:
            raise ConfigError(
                f"[carma] nvml_detail_every = {self.nvml_detail_every}: must be >= 1 (1 reads everything every sample)"
            )
        from carma_airflow.core.fencing import CapRule, IsolationMode

        IsolationMode.parse(self.isolation)
        CapRule.parse(self.isolation_cap)  # names every rule it accepts
        if self.isolation_margin_mib < 0:
            raise ConfigError("[carma] isolation_margin_mib must be >= 0")
        if self.schedulers not in ("auto", "one", "several"):
            raise ConfigError(f"[carma] schedulers = {self.schedulers!r}; use auto, one or several")
        if self.checkpoint_root and not Path(self.checkpoint_root).is_absolute():
            raise ConfigError(
                f"[carma] checkpoint_root = {self.checkpoint_root!r} is relative; write an absolute path, "
                "e.g. checkpoint_root = /shared/carma-checkpoints"
            )
        if self.peer_timeout_seconds <= 0:
            raise ConfigError("[carma] peer_timeout_seconds must be > 0 (e.g. 30)")
        if self.max_waiting < 1:
            raise ConfigError("[carma] max_waiting must be >= 1 (how many GPU tries may wait for a GPU)")
        parse_duration(self.telemetry_retention, "telemetry_retention")


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: str, option: str) -> float:
    """Seconds in ``raw`` ("90", "90s", "15m", "12h", "7d"); ConfigError naming ``option`` otherwise."""
    text = str(raw).strip().lower()
    unit = _DURATION_UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"[carma] {option} = {raw!r} is not a duration; write a number with s, m, h or d, e.g. {option} = 7d"
        )
    return value
