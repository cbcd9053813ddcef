"""The ``[carma]`` configuration section: one table of options, read once, validated.

The same table feeds the provider info (so ``airflow config list`` shows every option with its
description and default) and :class:`CarmaSettings` (what the executor reads in ``start()``).
Every option can also be set as ``AIRFLOW__CARMA__<OPTION>``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import DEFAULT_CAP_RULE
from carma_airflow.store.url import default_url


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    type: str  # string | integer | float | boolean
    default: str
    description: str
    example: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option(
        "gpu_backend",
        "string",
        "nvml",
        "Where GPU telemetry comes from: nvml (real NVIDIA GPUs) or simulated "
        "(GPUs modelled by carma's sharing model, for demos, CI and machines without GPUs).",
        "simulated",
    ),
    Option(
        "simulated_gpus",
        "string",
        "4xA100-40GB",
        "GPUs of the simulated backend, as NxSPEC or a comma list "
        "(specs: A100-40GB, A100-80GB, H100-80GB, H200-141GB, L4, L40S, V100-32GB, T4).",
        "2xA100-40GB,2xH100-80GB",
    ),
    Option("sample_period", "float", "1.0", "Seconds between two telemetry samples of every GPU.", "2.0"),
    Option(
        "policy",
        "string",
        "completion-time",
        "Placement policy: completion-time (default), interference-aware, predictive, "
        "most-free-memory, least-utilised, first-fit, best-fit, exclusive, round-robin or static-K.",
        "exclusive",
    ),
    Option("queue", "string", "backfill", "backfill (tasks that fit start while larger ones wait) or fifo.", "fifo"),
    Option(
        "estimator",
        "string",
        "history",
        "Memory estimate of a task that declares none: history (peak of its "
        "earlier successful runs, else the floor) or floor.",
        "floor",
    ),
    Option(
        "store_url",
        "string",
        "",
        "SQLAlchemy URL of carma's bookkeeping store. Empty: a SQLite file carma.db in AIRFLOW_HOME.",
        "postgresql+psycopg://airflow:***@db/airflow",
    ),
    Option(
        "state_dir",
        "string",
        "",
        "Folder for per-task result files and the simulated GPU ledger. Empty: AIRFLOW_HOME/carma.",
        "/var/lib/carma",
    ),
    Option(
        "checkpoint_root",
        "string",
        "",
        "Folder under which each GPU task instance gets a checkpoint folder, the same for all its tries "
        "(CARMA_CHECKPOINT_DIR in the task; docs/checkpoints.md). With dispatch = celery, a folder every GPU "
        "host mounts. Empty: the checkpoints folder of state_dir.",
        "/shared/carma-checkpoints",
    ),
    Option(
        "checkpoint_keep",
        "boolean",
        "False",
        "True: keep a task instance's checkpoint folder after it succeeds. False: remove it then (a folder "
        "is never removed while the task instance may still be retried).",
        "True",
    ),
    Option(
        "oom_retries",
        "integer",
        "2",
        "Extra tries a GPU task gets after a CUDA out-of-memory crash, on top of the author's own retries.",
        "3",
    ),
    Option("oom_retry_delay", "float", "5.0", "Seconds before a try that follows a CUDA OOM.", "30"),
    Option("reserve_mib", "integer", "512", "MiB kept free on every GPU.", "1024"),
    Option("headroom_mib", "integer", "2048", "Free MiB above a task's estimate a shared GPU must have.", "4096"),
    Option("floor_mib", "integer", "5120", "Free MiB demanded for a task with no estimate at all.", "8192"),
    Option(
        "lock_seconds",
        "float",
        "30.0",
        "After a placement, how long a tenant counts at its reservation before its observed memory is trusted.",
        "60",
    ),
    Option(
        "max_tenants",
        "integer",
        "3",
        "Most tasks sharing one GPU (completion-time, interference-aware and predictive policies).",
        "2",
    ),
    Option("starvation_seconds", "float", "3600", "A task waiting longer than this gets GPUs held for it.", "7200"),
    Option(
        "framework_guards",
        "boolean",
        "True",
        "Set TF_FORCE_GPU_ALLOW_GROWTH=true, "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in GPU "
        "tasks so frameworks do not grab the whole card.",
        "False",
    ),
    Option("stale_seconds", "float", "10.0", "A GPU without a fresh sample for this long takes no collocation.", "30"),
    Option(
        "strict_validation",
        "boolean",
        "False",
        "True: a GPU task with an invalid executor_config makes its "
        "whole DAG fail to import. False: only that task fails, with the message in its log.",
        "True",
    ),
    Option("host", "string", "", "Name of this GPU host in placements and the store. Empty: the hostname.", "gpu-01"),
    Option(
        "dispatch",
        "string",
        "local",
        "How placed tasks start: local (a process per task on the scheduler's host) or celery "
        "(on the chosen GPU host's Celery worker; every GPU host runs `carma agent` and a worker).",
        "celery",
    ),
    Option(
        "fault_kill_seconds",
        "float",
        "10.0",
        "A GPU that NVML reports failed (lost, off the bus, Xid) for this long gets its tasks stopped, "
        "so they retry on healthy GPUs.",
        "30",
    ),
    Option("snapshot_period", "float", "2.0", "Seconds between two live snapshots for the UI page.", "5"),
    Option(
        "host_timeout_seconds",
        "float",
        "30.0",
        "celery dispatch: a GPU host whose agent sent no heartbeat for this long leaves placement "
        "and its tasks are handled as lost.",
        "60",
    ),
    Option(
        "queue_prefix",
        "string",
        "carma-",
        "celery dispatch: a GPU host's Celery queue is this prefix followed by the host name.",
        "gpu-",
    ),
    Option(
        "max_waiting",
        "integer",
        "1024",
        "Most GPU tries that wait inside CarmaExecutor for a GPU. Waiting tries do not count against "
        "[core] parallelism (that limit counts what runs, across all executors); this one bounds the queue.",
        "4096",
    ),
    Option(
        "isolation",
        "string",
        "auto",
        "How each GPU try is held to the memory it was placed with: auto (the strongest the host has), "
        "framework (PyTorch/TensorFlow/JAX allocator caps), mps (an MPS daemon's per-client limit), driver "
        "(NVML per-cgroup limits), none (unfenced). A task's executor_config isolation overrides it. "
        "See docs/isolation.md.",
        "framework",
    ),
    Option(
        "isolation_margin_mib",
        "integer",
        "2048",
        "MiB a fenced try may use above the memory it was placed with before it hits its cap (its promise).",
        "4096",
    ),
    Option(
        "isolation_cap",
        "string",
        DEFAULT_CAP_RULE.value,
        "Where a framework or MPS cap sits: promise (its memory plus the margin, set at its start: protects "
        "tenants placed later), protective (the GPU less the co-tenants present when it starts) or live "
        "(protective, then re-set for PyTorch as co-tenants come and go; a cap that cannot be re-set, MPS's, "
        "is set to the promise). A try with the GPU to itself is capped at the whole GPU either way. The default "
        "is measured: docs/isolation.md.",
        "promise",
    ),
    Option(
        "schedulers",
        "string",
        "auto",
        "How many Airflow schedulers run a CarmaExecutor on this store: auto (several on PostgreSQL, "
        "sharing GPU reservations through the store; one on SQLite), several (PostgreSQL: always place "
        "under the store's lock), one (a second executor on the store places nothing and says why). "
        "See docs/schedulers.md.",
        "several",
    ),
    Option(
        "peer_timeout_seconds",
        "float",
        "30.0",
        "A CarmaExecutor whose heartbeat in the store is older than this is gone: its reservations "
        "count until its tries are adopted or reset, and a restarted executor reconciles its tries. "
        "Keep it at most [scheduler] scheduler_health_check_threshold.",
        "20",
    ),
    Option(
        "telemetry_retention",
        "string",
        "7d",
        "How long GPU telemetry history (carma_gpu_sample: a row per GPU every 30 s) is kept: a number with "
        "s, m, h or d (seconds without). Older rows are deleted in the background every 10 minutes, in "
        "batches; learned memory peaks and activity are kept. 0 keeps every row.",
        "30d",
    ),
)

_BOOL = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def option_default(name: str) -> Any:
    """The typed default of one option (for code that reads Airflow's conf directly)."""
    opt = next(o for o in OPTIONS if o.name == name)
    return _convert(opt, opt.default)


def _convert(option: Option, raw: str) -> Any:
    text = raw.strip()
    try:
        if option.type == "integer":
            return int(text)
        if option.type == "float":
            return float(text)
        if option.type == "boolean":
            return _BOOL[text.lower()]
    except (ValueError, KeyError):
        raise ConfigError(
            f"[carma] {option.name} = {raw!r} is not a valid {option.type}; e.g. {option.name} = {option.example}"
        ) from None
    return text


def _airflow_home() -> str:
    return os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")  # as Airflow finds its home


def default_state_dir(airflow_home: str | None = None) -> str:
    """``[carma] state_dir`` when it is empty: ``carma`` under ``airflow_home`` (None: Airflow's)."""
    return str(Path(airflow_home or _airflow_home()) / "carma")


@dataclass(frozen=True, slots=True)
class CarmaSettings:
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
            values[opt.name] = _convert(opt, opt.default if raw is None else raw)
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

    def validate(self) -> None:
        from carma_airflow.core.estimators import make_estimator
        from carma_airflow.core.gpu import parse_gpu_list
        from carma_airflow.core.policies import make_policy
        from carma_airflow.core.queueing import make_queue

        if self.gpu_backend not in ("nvml", "simulated"):
            raise ConfigError(f"[carma] gpu_backend = {self.gpu_backend!r}; use nvml or simulated")
        if self.gpu_backend == "simulated":
            parse_gpu_list(self.simulated_gpus)
        make_policy(self.policy)
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


def provider_config_section() -> dict[str, Any]:
    """The ``config`` entry of the provider info."""
    return {
        "carma": {
            "description": "CarmaExecutor: collocation-aware placement of GPU tasks.",
            "options": {
                opt.name: {
                    "description": opt.description,
                    "version_added": "0.1.0",
                    "type": opt.type,
                    "example": opt.example,
                    "default": opt.default,
                }
                for opt in OPTIONS
            },
        }
    }


def options_markdown() -> str:
    """The configuration reference page (docs/configuration.md is this text; a test keeps it so)."""
    lines = [
        "# Configuration reference: the `[carma]` section",
        "",
        "Generated from `carma_airflow/settings.py` (`python -m carma_airflow.settings > docs/configuration.md`).",
        "Every option can also be set as `AIRFLOW__CARMA__<OPTION>`; `airflow config list --section carma` shows them.",
        "",
        "| option | type | default | what it does |",
        "|---|---|---|---|",
    ]
    for opt in OPTIONS:
        default = f"`{opt.default}`" if opt.default else "(empty)"
        lines.append(f"| `{opt.name}` | {opt.type} | {default} | {opt.description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(options_markdown(), end="")
