"""``python -m gpukit fence [--dry-run]``: fenced collocation on one GPU (issues 18 and 22).

First the CUDA context one process holds, measured once per GPU model of the host
(gpukit/fence_worker.py ``context``: after ``torch.cuda.init()``, what NVML counts for the
process less ``torch.cuda.memory_reserved()``), printed beside what core/cuda_context.py counts.

Then two processes share GPU 0, each with the environment CarmaExecutor gives a fenced try
(carma_airflow.launching.taskenv + the fence of carma_airflow.taskrun.isolation, the CUDA context
counted as the executor counts it): a neighbour that declares and uses 12 GiB (half first, the
rest after the grower grew) and a grower that declares 8 GiB and then asks for most of the GPU.
Each scenario passes when:

* ``framework`` (PyTorch caps through the import hook, the cap fixed at the promise) and, where
  ``nvidia-cuda-mps-control`` can start a daemon, ``mps`` (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT):
  the grower gets the CUDA OOM, classified past its cap (FailureKind.CAP_OOM), and the neighbour
  finishes;
* ``framework live`` (the default rule, ``isolation_cap = live``): the grower starts alone, its
  cap the whole GPU less the reserve; when the neighbour is placed the kit re-sets the grower's
  cap file to the GPU less the neighbour's promise, as the executor does (executor/starting/starter.py),
  and the grower's follower thread re-sets PyTorch's fraction; then as ``framework``, and the
  grower's log must say its cap moved;
* ``driver`` (where the host has NVML's per-cgroup limit call; skipped with a line that says why
  where it has not): each process in its own cgroup leaf with its NVML limits (soft = promise,
  hard = cap), as the executor makes them (taskrun/driver_cap.py); as ``framework``, and neither
  process may have fallen back to framework caps;
* ``none`` (the control, unfenced): the grower gets its memory and the neighbour crashes.

The grower's OOM is classified with its fence (core/recovery.py ``KnownFence``), as a try
classifies its own.  Dry run: the simulated ledger plays the GPU (an A100-40GB), the caps, a
driver leaf's limit (executor/starting/sim_driver.py) and a CUDA context of ``SIM_CONTEXT_MIB``.  Exit 0
when every scenario that ran passed and every context was measured, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carma_airflow.core.cuda_context import context_source, cuda_context_mib
from carma_airflow.core.fencing import CapRule, Fence, FenceModel, IsolationMode, Tenant
from carma_airflow.core.oom_figures import KnownFence
from carma_airflow.core.recovery import FailureKind, classify_failure
from carma_airflow.launching import gpu_task_env
from carma_airflow.monitor.nvml import DriverLimits
from carma_airflow.taskrun.driver_cap import CGROUP_LEAF_ENV, DriverCapError
from carma_airflow.taskrun.fence_env import CONTEXT_ENV, RULE_ENV, SIM_LEAF_ENV
from carma_airflow.taskrun.isolation import HostIsolation, fence_for, mechanism_cap_mib, resolve
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, write_caps

GIB = 1024
NEIGHBOUR_MIB, GROWER_MIB, MARGIN_MIB = 12 * GIB, 8 * GIB, 2 * GIB
RESERVE_MIB = 512  # [carma] reserve_mib's default
SIM_CONTEXT_MIB = 480  # the dry run's played CUDA context (simulated GPUs hold none)
FOLLOW_S = 2.5  # a live cap file is re-read once a second (taskrun/live_cap.py PERIOD_S)
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Outcome:
    scenario: str
    passed: bool
    grower: dict[str, Any]
    neighbour: dict[str, Any]
    why: str


@dataclass(frozen=True)
class Context:
    """The CUDA context measured on one GPU model, beside what carma counts for it."""

    gpu_name: str
    measured: dict[str, Any]
    counted_mib: int
    source: str


@dataclass
class Report:
    contexts: list[Context] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Gpu:
    uuid: str
    name: str
    total_mib: int
    context_mib: int  # what the executor counts for it (core/cuda_context.py; 0 on simulated GPUs)


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARMA_", "XLA_", "CUDA_MPS_PINNED"))}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE.parents[2]), env.get("PYTHONPATH", "")])
    return env


def _fence(
    mode: IsolationMode, host: HostIsolation, gpu: Gpu, declared: int, rule: CapRule, others: list[int]
) -> Fence:
    return fence_for(
        resolve(mode, host, rule), reservation_mib=declared, totals_mib=[gpu.total_mib], exclusive=False,
        margin_mib=MARGIN_MIB, reserve_mib=RESERVE_MIB, co_tenants_by_gpu=[others], context_mib=[gpu.context_mib],
    )  # fmt: skip


def _env(fence: Fence, gpu: Gpu, sync: Path, rule: CapRule) -> dict[str, str]:
    """What the executor's starter gives a placed try with this fence (executor/starting/starter.py)."""
    env = _base_env()
    env.update(gpu_task_env([gpu.uuid], result_path=str(sync / "unused.json"), placement="fence check", fence=fence))
    if fence.fenced:
        env[RULE_ENV] = rule.value
        env[CONTEXT_ENV] = str(gpu.context_mib)
    return env


def _start(
    role: str, env: Mapping[str, str], sync: Path, phases: list[Any], ledger: str | None
) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "gpukit.fence_worker", role, str(sync), json.dumps(phases)]
    if ledger:
        cmd += ["--ledger", ledger]
    return subprocess.Popen(cmd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=180)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    found: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "message": err[-800:], "exc_type": None}
    found["log"] = [line for line in (out + err).splitlines() if line.startswith("[carma]")]
    return found


def _run_pair(
    envs: Mapping[str, dict[str, str]],
    phases: Mapping[str, list[Any]],
    sync: Path,
    ledger: str | None,
    between: Callable[[], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """The grower first; ``between`` (the neighbour's placement: a live cap re-set) before the neighbour."""
    procs = {"grower": _start("grower", envs["grower"], sync, phases["grower"], ledger)}
    if between is not None:
        between()
    procs["neighbour"] = _start("neighbour", envs["neighbour"], sync, phases["neighbour"], ledger)
    return {role: _result(proc) for role, proc in procs.items()}


def _grow_mib(gpu: Gpu) -> int:
    # all but what the neighbour holds and 3 GiB (two CUDA contexts fit; its second half does not)
    return gpu.total_mib - NEIGHBOUR_MIB // 2 - GROWER_MIB - 3 * GIB


def _judge(name: str, mode: IsolationMode, got: dict[str, dict[str, Any]], known: KnownFence | None) -> Outcome:
    grower, neighbour = got["grower"], got["neighbour"]
    if mode is IsolationMode.NONE:
        passed = bool(grower["ok"] and not neighbour["ok"])
        why = "unfenced: the grower got its memory and the neighbour crashed" if passed else "the control did not crash"
        return Outcome(name, passed, grower, neighbour, why)
    failure = classify_failure(grower.get("exc_type"), grower.get("message"), fence=known)
    passed = bool(neighbour["ok"] and not grower["ok"] and failure.kind is FailureKind.CAP_OOM)
    got_oom = failure.kind.value if not grower["ok"] else "no OOM"
    why = f"grower: {got_oom}; neighbour: {'finished' if neighbour['ok'] else 'crashed'}"
    return Outcome(name, passed, grower, neighbour, why)


def scenario(mode: IsolationMode, host: HostIsolation, gpu: Gpu, ledger: str | None) -> Outcome:
    """``framework``, ``mps`` (the cap fixed at the promise) or ``none``: both placed at once."""
    phases = {
        "neighbour": [[None, NEIGHBOUR_MIB // 2, "half"], ["grown-or-failed", NEIGHBOUR_MIB // 2, None]],
        "grower": [["half", GROWER_MIB, None], [None, _grow_mib(gpu), "grown-or-failed"]],
    }
    sync = Path(tempfile.mkdtemp(prefix=f"fence-{mode.value}-"))
    try:
        fences = {
            "neighbour": _fence(mode, host, gpu, NEIGHBOUR_MIB, CapRule.PROMISE, []),
            "grower": _fence(mode, host, gpu, GROWER_MIB, CapRule.PROMISE, []),
        }
        envs = {role: _env(fence, gpu, sync, CapRule.PROMISE) for role, fence in fences.items()}
        got = _run_pair(envs, phases, sync, ledger)
    finally:
        shutil.rmtree(sync, ignore_errors=True)
    grower = fences["grower"]
    known = KnownFence(mode, grower.cap_mib, (gpu.context_mib,)) if grower.fenced else None
    return _judge(mode.value, mode, got, known)


def live_scenario(host: HostIsolation, gpu: Gpu, ledger: str | None) -> Outcome:
    """``framework`` under ``isolation_cap = live``: the grower's cap file re-set when the neighbour
    is placed, as the executor's starter re-sets it (``_caps_now``, ``_file_caps``)."""
    model = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE)
    promise = {"grower": model.promise_mib(GROWER_MIB, MARGIN_MIB, gpu.total_mib)}
    promise["neighbour"] = model.promise_mib(NEIGHBOUR_MIB, MARGIN_MIB, gpu.total_mib)
    phases = {
        "grower": [[None, GROWER_MIB, "grower-in"], ["cap-reset", _grow_mib(gpu), "grown-or-failed"]],
        "neighbour": [["cap-reset", NEIGHBOUR_MIB // 2, "half"], ["grown-or-failed", NEIGHBOUR_MIB // 2, None]],
    }
    sync = Path(tempfile.mkdtemp(prefix="fence-live-"))
    driven = FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE)  # the starter's re-set rule, any mechanism

    def cap_now(others: list[int]) -> int:
        held = driven.may_hold_mib(
            start_cap_mib=None, promise_mib=promise["grower"], total_mib=gpu.total_mib, reserve_mib=RESERVE_MIB,
            co_tenants=[Tenant(p) for p in others],
        )  # fmt: skip
        return mechanism_cap_mib(IsolationMode.FRAMEWORK, gpu.total_mib if held is None else held, gpu.context_mib)

    reset = cap_now([promise["neighbour"]])
    try:
        grower = _fence(IsolationMode.FRAMEWORK, host, gpu, GROWER_MIB, CapRule.LIVE, [])  # alone at its start
        neighbour = _fence(IsolationMode.FRAMEWORK, host, gpu, NEIGHBOUR_MIB, CapRule.LIVE, [promise["grower"]])
        cap_file = sync / "grower.cap"
        write_caps(cap_file, [cap_now([])])
        envs = {
            "grower": {**_env(grower, gpu, sync, CapRule.LIVE), CAP_FILE_ENV: str(cap_file)},
            "neighbour": _env(neighbour, gpu, sync, CapRule.LIVE),
        }

        def placed() -> None:  # the neighbour is placed: the grower's cap counts its promise from now on
            deadline = time.monotonic() + 120
            while not (sync / "grower-in").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            write_caps(cap_file, [reset])
            time.sleep(FOLLOW_S)  # the grower's follower thread re-reads it
            (sync / "cap-reset").touch()

        got = _run_pair(envs, phases, sync, ledger, between=placed)
    finally:
        shutil.rmtree(sync, ignore_errors=True)
    outcome = _judge("framework live", IsolationMode.FRAMEWORK, got, KnownFence(IsolationMode.FRAMEWORK, (reset,)))
    moved = [line for line in got["grower"]["log"] if "cap now" in line]
    said = f"{outcome.why}; {moved[-1]}" if moved else f"{outcome.why}; its cap never moved"
    return Outcome(outcome.scenario, outcome.passed and bool(moved), outcome.grower, outcome.neighbour, said)


def driver_scenario(host: HostIsolation, gpu: Gpu, ledger: str | None) -> Outcome:
    """``driver``: each process in a cgroup leaf of its own, its limits set as the executor sets them;
    on simulated GPUs the ledger keeps them (executor/starting/sim_driver.py)."""
    phases = {
        "neighbour": [[None, NEIGHBOUR_MIB // 2, "half"], ["grown-or-failed", NEIGHBOUR_MIB // 2, None]],
        "grower": [["half", GROWER_MIB, None], [None, _grow_mib(gpu), "grown-or-failed"]],
    }
    fences = {
        "neighbour": _fence(IsolationMode.DRIVER, host, gpu, NEIGHBOUR_MIB, CapRule.PROMISE, []),
        "grower": _fence(IsolationMode.DRIVER, host, gpu, GROWER_MIB, CapRule.PROMISE, []),
    }
    sync = Path(tempfile.mkdtemp(prefix="fence-driver-"))
    caps: Any
    if ledger:
        from carma_airflow.executor.starting import SimulatedDriverCaps
        from carma_airflow.monitor.ledger import Ledger

        caps, where = SimulatedDriverCaps(Ledger(ledger)), SIM_LEAF_ENV
    else:
        from carma_airflow.taskrun.driver_cap import DriverCaps

        caps = DriverCaps(owner=f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}")
        where = CGROUP_LEAF_ENV
    try:
        envs = {}
        for role, fence in fences.items():
            leaf = caps.open(role, f"fence-{role}", [gpu.uuid], fence.promise_mib, fence.cap_mib)
            envs[role] = {**_env(fence, gpu, sync, CapRule.PROMISE), where: str(leaf)}
        got = _run_pair(envs, phases, sync, ledger)
    except DriverCapError as exc:
        empty: dict[str, Any] = {"ok": False, "message": None}
        return Outcome("driver", False, empty, empty, f"the driver's limits could not be set: {exc}")
    finally:
        caps.keep([])  # soft limits cleared, leaves removed (a leaf still busy is left: the kernel refuses)
        shutil.rmtree(sync, ignore_errors=True)
    known = KnownFence(IsolationMode.DRIVER, fences["grower"].cap_mib, (gpu.context_mib,))
    outcome = _judge("driver", IsolationMode.DRIVER, got, known)
    fell = [line for r in got.values() for line in r["log"] if "driver caps not in force" in line]
    if fell:
        return Outcome("driver", False, outcome.grower, outcome.neighbour, f"{outcome.why}; but {fell[0]}")
    return outcome


def driver_check(support: DriverLimits, host: HostIsolation, gpu: Gpu, ledger: str | None) -> Outcome | str:
    """The ``driver`` scenario where the host has NVML's per-cgroup limit call; else the line that
    says why it was skipped."""
    if not support.supported:
        return f"driver: skipped: this host has no NVML per-cgroup memory limit call ({support.why})"
    return driver_scenario(host, gpu, ledger)


def measure_context(gpu: Gpu, ledger: str | None) -> Context:
    """The CUDA context one process holds on ``gpu`` (gpukit/fence_worker.py ``context``)."""
    env = {**_base_env(), "CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    cmd = [sys.executable, "-m", "gpukit.fence_worker", "context", tempfile.gettempdir(), "[]"]
    if ledger:
        cmd += ["--ledger", ledger, "--sim-context-mib", str(SIM_CONTEXT_MIB)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    found: dict[str, Any] = json.loads(lines[-1]) if lines else {"ok": False, "message": proc.stderr[-800:]}
    return Context(gpu.name, found, cuda_context_mib(gpu.name), context_source(gpu.name))


def _one_per_model(gpus: list[Gpu]) -> list[Gpu]:
    seen: dict[str, Gpu] = {}
    for g in gpus:
        seen.setdefault(g.name, g)
    return list(seen.values())


def run(dry_run: bool) -> Report:
    report = Report()
    if dry_run:
        from carma_airflow.core.gpu import gpu_spec
        from carma_airflow.monitor.ledger import Ledger, sim_uuid

        folder = Path(tempfile.mkdtemp(prefix="fence-ledger-"))
        spec = gpu_spec("A100-40GB")
        ledger = Ledger(folder / "ledger.json")
        ledger.init([spec])
        host = HostIsolation("simulated")
        gpu = Gpu(sim_uuid(0), spec.name, spec.memory_mib, cuda_context_mib(spec.name, simulated=True))
        report.contexts.append(measure_context(gpu, str(ledger.path)))
        for mode in (IsolationMode.FRAMEWORK, IsolationMode.NONE):
            report.outcomes.append(scenario(mode, host, gpu, str(ledger.path)))
        report.outcomes.append(live_scenario(host, gpu, str(ledger.path)))
        played = DriverLimits(True, "simulated GPUs: the ledger plays each leaf's hard limit")
        _add(report, driver_check(played, host, gpu, str(ledger.path)))
        return report
    from carma_airflow.monitor.nvml import NvmlProbe, driver_memory_limits

    samples = [s for s in NvmlProbe().sample() if s.ok]
    gpus = [Gpu(s.uuid, s.name, s.memory_total_mib, cuda_context_mib(s.name)) for s in samples]
    report.contexts.extend(measure_context(g, None) for g in _one_per_model(gpus))
    gpu, host = gpus[0], HostIsolation("nvml")
    report.outcomes.extend(scenario(m, host, gpu, None) for m in (IsolationMode.FRAMEWORK, IsolationMode.NONE))
    report.outcomes.append(live_scenario(host, gpu, None))
    support = driver_memory_limits()
    driver_host = HostIsolation("nvml", driver_limits=support.supported, driver_why=support.why)
    _add(report, driver_check(support, driver_host, gpu, None))
    pipe_dir = Path(tempfile.mkdtemp(prefix="carma-mps-"))
    if _mps_daemon(pipe_dir):
        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe_dir)
        try:
            mps_host = HostIsolation("nvml", mps_daemon=True)
            report.outcomes.append(scenario(IsolationMode.MPS, mps_host, gpu, None))
        finally:
            _mps_quit(pipe_dir)
    else:
        report.skipped.append("mps: skipped: no MPS control daemon could be started here")
    return report


def _add(report: Report, got: Outcome | str) -> None:
    if isinstance(got, Outcome):
        report.outcomes.append(got)
    else:
        report.skipped.append(got)


def _mps_daemon(pipe_dir: Path) -> bool:
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return False
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(pipe_dir)}
    return subprocess.run([control, "-d"], env=env, check=False, timeout=30).returncode == 0


def _mps_quit(pipe_dir: Path) -> None:
    control = shutil.which("nvidia-cuda-mps-control")
    if control:  # NVIDIA's way to end the daemon (its clients have ended by now)
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir)}
        subprocess.run([control], input="quit\n", text=True, env=env, check=False, timeout=30)


def describe_context(c: Context) -> str:
    m = c.measured
    if not m.get("ok"):
        why = f"{m.get('exc_type')}: {(m.get('message') or '')[:200]}"
        return f"CUDA context on {c.gpu_name}: FAIL: not measured ({why})"
    played = f"; {m['played']}" if m.get("played") else ""
    return (
        f"CUDA context on {c.gpu_name}: {m['context_mib']} MiB per process after torch.cuda.init() "
        f"({m['method']} {m['process_mib']} MiB less PyTorch's reserved {m['reserved_mib']} MiB), "
        f"{m['with_cublas_mib']} MiB with cuBLAS loaded; core/cuda_context.py counts {c.counted_mib} MiB: "
        f"{c.source}{played}"
    )


def main(dry_run: bool) -> int:
    report = run(dry_run)
    for c in report.contexts:
        print(f"[fence] {describe_context(c)}")
        print(f"[fence] context {json.dumps({'gpu_name': c.gpu_name, 'counted_mib': c.counted_mib, **c.measured})}")
    for line in report.skipped:
        print(f"[fence] {line}")
    for o in report.outcomes:
        print(f"[fence] {o.scenario}: {'PASS' if o.passed else 'FAIL'}: {o.why}")
        for role, r in (("grower", o.grower), ("neighbour", o.neighbour)):
            print(f"[fence]   {role}: ok={r.get('ok')} held {r.get('held_mib')} MiB {(r.get('message') or '')[:160]}")
    measured = all(c.measured.get("ok") for c in report.contexts)
    return 0 if report.outcomes and all(o.passed for o in report.outcomes) and measured else 1


__all__ = [
    "Context",
    "Gpu",
    "Outcome",
    "Report",
    "describe_context",
    "driver_check",
    "driver_scenario",
    "live_scenario",
    "main",
    "measure_context",
    "run",
    "scenario",
]
