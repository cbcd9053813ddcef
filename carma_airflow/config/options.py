"""The ``[carma]`` options: one table (name, type, default, description, example) and what is
made from it.

The table feeds the provider info (so ``airflow config list`` shows every option with its
description and default), the configuration reference (docs/configuration.md) and
:class:`~carma_airflow.config.settings.CarmaSettings` (the validated settings the executor reads in
``start()``), which turns each raw value into its type with :func:`parse_value`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import DEFAULT_CAP_RULE


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
        "nvml_detail_every",
        "integer",
        "5",
        "NVML backend: every Nth sample also reads what the placer and the risk window do not read every "
        "period (process lists, power, energy, busy time beside GPM, GPU count and MIG layout); the others "
        "read memory, GPM activity and each process's share of SM time only. 1: everything every sample.",
        "1",
    ),
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
        "earlier successful runs, else the floor) or floor. carma simulate with no --estimator decides alike.",
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
    Option(
        "min_gain",
        "string",
        "",
        "Floor on what a collocation adds (completion-time and predictive policies): sharing a GPU must "
        "raise its summed predicted speed (solo = 1.0 per task) by at least this much, else the task waits "
        "or goes elsewhere. Empty: the policy's own (completion-time: 0.0 on a GPU model once the "
        "interference model has learned it, none before; predictive: 0.25). Set, it applies on every GPU, "
        "learned or not. 0.3 closes the cold-start gap once the interference fit has learned "
        "(docs/placement.md) but costs very deep queues mean JCT and CPU.",
        "0.3",
    ),
    Option(
        "learned_floor",
        "string",
        "",
        "Floor once the interference model has learned a GPU model (completion-time policy): sharing a GPU "
        "of that model must raise its summed predicted speed (solo = 1.0 per task) by at least this much. "
        "Empty: the policy's own, 0.0 (a collocation predicted to lower what the GPU gets done per second "
        "is refused; docs/placement.md); off: none. min_gain, where set, applies instead.",
        "off",
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
    Option(
        "allow_unknown_keys",
        "boolean",
        "False",
        "False: a key carma does not know in a GPU task's executor_config['carma'] (a typo such as memroy, "
        "a gpu_task() keyword it does not take, a section named crama) fails that task, naming the nearest "
        "valid key. True: such keys are kept and ignored (for DAGs written for a later carma).",
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
        "How each GPU try is fenced (with the default isolation_cap = live: kept out of the memory its "
        "co-tenants were promised, so a try alone on its GPU may grow past its declaration): auto (the "
        "strongest the host has), "
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
        "(protective, then re-set for PyTorch as co-tenants come and go; under mps the client's pinned limit, "
        "which cannot be re-set, is fixed at the start at protective plus isolation_margin_mib and PyTorch's cap "
        "moves beneath it). A try with the GPU to itself is capped at the whole GPU either way. The default "
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
    return parse_value(opt, opt.default)


def parse_value(option: Option, raw: str) -> Any:
    """``raw`` as ``option``'s type (surrounding blanks dropped); ConfigError with an example otherwise."""
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
        "Generated from `carma_airflow/config/options.py`"
        " (`python -m carma_airflow.config.options > docs/configuration.md`).",
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
