"""The simulated GPUs' workload: what a task's process runs on ``[carma] gpu_backend = simulated``.

The simulated GPU backend has two halves: the ledger the monitor reads (monitor/ledger.py,
monitor/simulated.py) and this, the task side, which holds memory in that ledger as a CUDA
program would.  DAGs and tests reach it as :func:`carma_airflow.testing.simulated_training`.

:func:`simulated_training` behaves like a training script as the rest of carma-airflow sees it:
it finds its GPUs in ``CUDA_VISIBLE_DEVICES`` (simulated UUIDs such as ``GPU-SIM-0002``), ramps its memory up in the
simulated GPU ledger (``CARMA_SIM_LEDGER``) where the monitor sees it, crashes with a
PyTorch-style CUDA OOM when a GPU is full, and "trains" more slowly when it shares its GPUs, as
the core's sharing model says.

On a fleet of several GPU models (``[carma] simulated_gpus = 2xA100-80GB,2xV100-32GB``) a task's
work is its solo seconds on a *reference* model; ``speedup`` names how much faster it runs on
others (``{"A100-80GB": 4.0}``: a quarter of the time there), every model it does not name at
the reference's pace.  The GPU model of each visible GPU is the ledger's (the spec the executor
wrote it with); a try on several GPUs goes at its slowest GPU's pace, as data-parallel training
waits for its slowest rank.  :func:`spec_speedup` gives the spec sheets' speeds instead (the
simulator's ``spec`` speed truth, core/speed.py).  Without ``speedup`` every model is alike.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from carma_airflow import checkpoint as _checkpoint
from carma_airflow.core.errors import UnknownGpuSpecError
from carma_airflow.core.gpu import GPU_CATALOGUE, gpu_spec
from carma_airflow.core.sharing import ActivityProfile, SharingModel
from carma_airflow.core.speed import DEFAULT_COMPUTE_SHARE, spec_speed
from carma_airflow.monitor.ledger import Ledger, LedgerError, LedgerState, SimulatedCudaOOM
from carma_airflow.taskrun.fence_env import fence_from_env
from carma_airflow.taskrun.live_cap import SimulatedCaps
from carma_airflow.taskrun.outcome import SIM_LEDGER_ENV
from carma_airflow.taskrun.progress import report_progress

__all__ = ["SimulatedCudaOOM", "simulated_training", "spec_speedup", "speed_on", "training_slowdown"]

log = logging.getLogger(__name__)

_RAMP_STEPS = 4


def training_slowdown(state: LedgerState, pid: int, uuids: list[str], model: SharingModel) -> float:
    """How much slower than alone ``pid`` progresses: the sharing model's slowdown on its most
    crowded GPU (1.0 where it is not a tenant)."""
    worst = 1.0
    for uuid in uuids:
        tenants = state.on(uuid)
        for i, slowdown in enumerate(model.slowdowns([t.profile for t in tenants])):
            if tenants[i].pid == pid:
                worst = max(worst, slowdown)
    return worst


def _speeds(speedup: Mapping[str, float] | None) -> dict[str, float]:
    """``speedup`` checked, by catalogue name (a typo fails where the DAG calls it, not silently alike)."""
    if speedup is None:
        return {}
    if not isinstance(speedup, Mapping):
        raise ValueError(f"speedup must map GPU model names to speeds, e.g. {{'A100-80GB': 4.0}}; got {speedup!r}")
    out: dict[str, float] = {}
    for name, value in speedup.items():
        try:
            spec = gpu_spec(str(name))
        except UnknownGpuSpecError as exc:
            raise ValueError(f"speedup: {exc}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"speedup[{name!r}] must be a speed > 0 (1.0: the reference's pace), got {value!r}")
        out[spec.name] = float(value)
    return out


def speed_on(models: list[str], speedup: Mapping[str, float] | None) -> float:
    """The pace of a try on GPUs of these ``models`` relative to the reference: the slowest GPU's
    (a model ``speedup`` does not name goes at 1.0; no ``speedup``: 1.0 everywhere)."""
    speeds = _speeds(speedup)
    if not speeds or not models:
        return 1.0
    return min(speeds.get(_catalogue_name(m), 1.0) for m in models)


def _catalogue_name(model: str) -> str:
    spec = GPU_CATALOGUE.get(model.strip().lower())
    return spec.name if spec is not None else model


def spec_speedup(reference: str, compute_share: float = DEFAULT_COMPUTE_SHARE) -> dict[str, float]:
    """Every catalogue model's speed relative to ``reference`` by the spec sheets, for a task whose
    step is ``compute_share`` compute and the rest memory traffic (core/speed.py): a ``speedup``
    for :func:`simulated_training`, e.g. ``spec_speedup("V100-32GB", 0.8)``."""
    try:
        ref = gpu_spec(reference)
    except UnknownGpuSpecError as exc:
        raise ValueError(f"spec_speedup: {exc}") from None
    return {spec.name: spec_speed(spec, ref, compute_share) for spec in GPU_CATALOGUE.values()}


def _label() -> str:
    dag, task = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_TASK_ID")
    return f"{dag}.{task}" if dag and task else f"simulated_training[{os.getpid()}]"


def simulated_training(
    peak_mib: int,
    seconds: float,
    *,
    activity: float = 0.5,
    ramp_s: float = 0.5,
    ledger_path: str | None = None,
    step_s: float = 0.1,
    grow_to_mib: int | None = None,
    grow_after_s: float = 0.0,
    checkpoint_every_s: float | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    oom_after_s: float | None = None,
    speedup: Mapping[str, float] | None = None,
    until_file: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Hold ``peak_mib`` on every visible simulated GPU and train for ``seconds`` of solo work.

    Memory ramps up over ``ramp_s`` in a few steps (:class:`SimulatedCudaOOM` if a GPU is full);
    training then progresses at ``1 / slowdown`` per wall second, the slowdown coming from the
    co-tenants in the ledger, re-read every ``step_s``.  With ``grow_to_mib``, once
    ``grow_after_s`` of that work is done the memory grows to ``grow_to_mib`` in one allocation,
    as real training does at its first validation step.  A fenced try (its cap in the
    environment, carma_airflow/taskrun/isolation.py) is held as its mechanism would hold it
    (taskrun/live_cap.py ``SimulatedCaps``): a cap set at its start, or re-read from its cap file
    once a second, or its driver leaf's hard limit in the ledger.  Memory is
    released at the end, crash or not.

    With ``checkpoint_every_s`` it checkpoints like a real training: every that many seconds of
    solo work it saves its progress in the task instance's checkpoint folder (``checkpoint_dir``,
    by default the one CarmaExecutor names, carma_airflow/checkpoint.py; its step is one second
    of work) and records it; a later try of the same task instance resumes from the last
    checkpoint (its log says where) instead of starting over.  ``oom_after_s``: a CUDA OOM once
    that much work is done (an allocation the GPU cannot hold), for tests of recovery; give it
    to the first try only, or every try crashes there.

    ``speedup``: GPU model name (the catalogue's, ``A100-80GB``) -> the task's speed there relative
    to the reference model its ``seconds`` are measured on; a model not named goes at 1.0 (the
    reference's pace).  ``{"A100-80GB": 4.0}`` with ``seconds=8``: 2 s alone on an A100-80GB, 8 s
    on any other model.  A try on several GPUs goes at its slowest GPU's pace.  Every figure
    given in seconds of work (``seconds``, ``grow_after_s``, ``checkpoint_every_s``,
    ``oom_after_s``) is on the reference.  None (the default): every model alike.

    ``until_file``: the training ends early, its memory held to the end, once that file exists
    (checked every ``step_s``): a test holds a GPU for as long as its checks need, however loaded
    the machine, with ``seconds`` the most it may take.

    Returns ``peak_mib`` (the most held), ``gpus``, ``gpu_models`` (each GPU's model, from the
    ledger), ``speed`` (the pace on them relative to the reference), ``wall_s`` (ramp included),
    ``train_s``, ``slowdown`` (training wall time over the solo time on these GPUs: what
    co-tenants cost), ``resumed_from_s`` (the work a checkpoint gave this try, None if it
    started from zero) and ``checkpoints`` (how many it saved).
    """
    if peak_mib < 0 or seconds < 0 or ramp_s < 0 or step_s <= 0 or grow_after_s < 0:
        raise ValueError("peak_mib, seconds, ramp_s and grow_after_s must be >= 0 and step_s > 0")
    if grow_to_mib is not None and grow_to_mib < peak_mib:
        raise ValueError(f"grow_to_mib ({grow_to_mib}) must be at least peak_mib ({peak_mib})")
    if not 0.0 <= activity <= 1.0:
        raise ValueError(f"activity is a share of SM time, between 0 and 1; got {activity}")
    if checkpoint_every_s is not None and checkpoint_every_s <= 0:
        raise ValueError(f"checkpoint_every_s must be > 0 seconds of work, got {checkpoint_every_s}")
    if oom_after_s is not None and oom_after_s < 0:
        raise ValueError(f"oom_after_s must be >= 0, got {oom_after_s}")
    _speeds(speedup)  # a bad speedup fails before anything is held
    folder = _checkpoint.checkpoint_dir(checkpoint_dir) if checkpoint_every_s is not None else None
    visible = [u.strip() for u in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip()]
    if not visible:
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")
    path = ledger_path or os.environ.get(SIM_LEDGER_ENV)
    if not path:
        raise RuntimeError(
            f"simulated_training needs the simulated GPU ledger: pass ledger_path= or set {SIM_LEDGER_ENV} "
            "(the carma executor sets it when [carma] gpu_backend = simulated)"
        )
    ledger = Ledger(path)
    known = {gpu.uuid for gpu in ledger.gpus()}
    unknown = [u for u in visible if u not in known]
    if unknown:
        raise RuntimeError(
            f"CUDA error: no CUDA-capable device is detected (CUDA_VISIBLE_DEVICES names {', '.join(unknown)}, "
            f"which the simulated GPU ledger {path} does not have; it has {', '.join(sorted(known)) or 'none'})"
        )

    specs = {gpu.uuid: gpu.spec for gpu in ledger.gpus()}
    total_mib = {uuid: spec.memory_mib for uuid, spec in specs.items()}
    models = [specs[u].name for u in visible]
    speed = speed_on(models, speedup)  # work per wall second alone on these GPUs
    fence = fence_from_env(os.environ, len(visible))
    pid = os.getpid()
    profile = ActivityProfile(activity, activity * 0.6, activity * 0.5)

    # held as the try's real mechanism would hold it: a cap set at its start (or re-read from its
    # cap file), or its driver leaf's hard limit in the ledger (taskrun/live_cap.py)
    caps = SimulatedCaps(fence, os.environ) if fence is not None else None

    def allocate(mib: int) -> None:
        for ordinal, uuid in enumerate(visible):
            if fence is None or caps is None:
                ledger.allocate(pid, uuid, mib, profile, label, ordinal=ordinal)
                continue
            cap = caps.cap_mib(ordinal)
            promise = fence.promise_mib[ordinal] if cap is not None else None
            ledger.allocate(
                pid, uuid, mib, profile, label, ordinal=ordinal, promise_mib=promise, cap_mib=cap,
                leaf=caps.leaf, held_by=caps.held_by_on(ordinal),
            )  # fmt: skip

    model = SharingModel()
    label = _label()
    started = time.monotonic()
    try:
        steps = _RAMP_STEPS if peak_mib >= _RAMP_STEPS and ramp_s > 0 else 1
        for step in range(steps):  # the peak is reached at ramp_s, as a real start-up would
            time.sleep(ramp_s / steps)
            allocate(peak_mib // steps + (peak_mib % steps if step == steps - 1 else 0))

        train_start = last = time.monotonic()
        resumed = _resume(folder, seconds) if folder is not None else None
        done = begun = resumed or 0.0
        saves = 0
        every = checkpoint_every_s or float("inf")
        next_save = begun + every
        held = peak_mib
        while done < seconds and not (until_file is not None and os.path.exists(until_file)):
            if grow_to_mib is not None and held < grow_to_mib and done >= grow_after_s:
                allocate(grow_to_mib - held)
                held = grow_to_mib
            if folder is not None and done >= next_save:
                _save(folder, done)
                saves += 1
                next_save = begun + every * (saves + 1)
            if oom_after_s is not None and done >= oom_after_s:  # more than the whole GPU: a real ledger OOM
                allocate(max(total_mib[u] for u in visible) + 1)
            state = ledger.state()
            failed = [u for u in visible if u in state.faults]
            if failed:  # as CUDA reports a GPU lost under a running kernel (Xid 79 and the like)
                why = state.faults[failed[0]]
                raise RuntimeError(
                    f"CUDA error: unspecified launch failure on {failed[0]} (simulated GPU fault: {why})"
                )
            slowdown = training_slowdown(state, pid, visible, model)
            pace = slowdown / speed  # wall seconds per second of work
            until = [seconds - done]
            if oom_after_s is not None and oom_after_s > done:
                until.append(oom_after_s - done)
            if folder is not None:
                until.append(next_save - done)
            time.sleep(max(0.0, min(step_s, min(until) * pace)))
            now = time.monotonic()
            done += (now - last) / pace
            last = now
            report_progress(min(done, seconds), seconds)  # as a training loop reports its steps
        train_s = last - train_start
    finally:
        if caps is not None:
            caps.stop()
        try:
            ledger.release(pid)
        except LedgerError as exc:  # the ledger vanished: nothing left to release
            log.warning("could not release simulated GPU memory: %s", exc)
    return {
        "peak_mib": held,
        "gpus": visible,
        "gpu_models": models,
        "speed": speed,
        "wall_s": time.monotonic() - started,
        "train_s": train_s,
        "slowdown": train_s * speed / (done - begun) if done > begun else 1.0,
        "resumed_from_s": resumed,
        "checkpoints": saves,
    }


SIMULATED_STATE = "simulated-training.json"  # the simulated training's own checkpoint


def _save(folder: Path, done_s: float) -> None:
    """A checkpoint of ``done_s`` seconds of work: the training's state (atomically), then the record."""
    with _checkpoint.atomic_path(folder / SIMULATED_STATE) as tmp:
        tmp.write_text(json.dumps({"done_s": done_s}))
    _checkpoint.record_checkpoint(int(done_s), folder=folder)


def _resume(folder: Path, seconds: float) -> float | None:
    """The work an earlier try's checkpoint holds (said in the log), None if there is none."""
    try:
        done = float(json.loads((folder / SIMULATED_STATE).read_text())["done_s"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("simulated training: unreadable checkpoint in %s (%s); starting from zero", folder, exc)
        return None
    if not 0.0 < done < float("inf"):
        return None
    done = min(done, seconds)
    _checkpoint.record_resume(_checkpoint.last_checkpoint(folder) or None, step=int(done))
    return done
