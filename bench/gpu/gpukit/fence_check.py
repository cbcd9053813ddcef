"""``python -m gpukit fence [--dry-run]``: fenced collocation on one GPU (issue 18).

Two processes share GPU 0, each with the environment CarmaExecutor gives a fenced try
(carma_airflow.executor.taskenv + the fence of carma_airflow.taskrun.isolation): a neighbour that
declares and uses 12 GiB (half first, the rest after the grower grew) and a grower that declares
8 GiB and then asks for most of the GPU.  Each scenario passes when:

* ``framework`` (PyTorch caps through the import hook) and, where ``nvidia-cuda-mps-control``
  can start a daemon, ``mps`` (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT): the grower gets the CUDA OOM,
  classified past its cap (FailureKind.CAP_OOM), and the neighbour finishes;
* ``none`` (the control, unfenced): the grower gets its memory and the neighbour crashes.

Dry run: the simulated ledger plays the GPU (an A100-40GB) and the caps.  Exit 0 when every
scenario that ran passed, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.recovery import FailureKind, classify_failure
from carma_airflow.executor.taskenv import gpu_task_env
from carma_airflow.taskrun.isolation import HostIsolation, fence_for, resolve

GIB = 1024
NEIGHBOUR_MIB, GROWER_MIB, MARGIN_MIB = 12 * GIB, 8 * GIB, 2 * GIB
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Outcome:
    scenario: str
    passed: bool
    grower: dict[str, Any]
    neighbour: dict[str, Any]
    why: str


def _env(mode: IsolationMode, host: HostIsolation, uuid: str, total: int, declared: int, sync: Path) -> dict[str, str]:
    fence = fence_for(
        resolve(mode, host), reservation_mib=declared, totals_mib=[total], exclusive=False, margin_mib=MARGIN_MIB
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARMA_", "XLA_", "CUDA_MPS_PINNED"))}
    env.update(gpu_task_env([uuid], result_path=str(sync / "unused.json"), placement="fence check", fence=fence))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE.parents[2]), env.get("PYTHONPATH", "")])
    return env


def _run_pair(
    envs: Mapping[str, dict[str, str]], phases: Mapping[str, list[Any]], sync: Path, ledger: str | None
) -> dict[str, dict[str, Any]]:
    procs = {}
    for role in ("neighbour", "grower"):
        cmd = [sys.executable, "-m", "gpukit.fence_worker", role, str(sync), json.dumps(phases[role])]
        if ledger:
            cmd += ["--ledger", ledger]
        procs[role] = subprocess.Popen(cmd, env=envs[role], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for role, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results[role] = json.loads(lines[-1]) if lines else {"ok": False, "message": err[-800:], "exc_type": None}
    return results


def scenario(mode: IsolationMode, host: HostIsolation, uuid: str, total: int, ledger: str | None) -> Outcome:
    # all but what the neighbour holds and 3 GiB (two CUDA contexts fit; its second half does not)
    grow = total - NEIGHBOUR_MIB // 2 - GROWER_MIB - 3 * GIB
    phases = {
        "neighbour": [[None, NEIGHBOUR_MIB // 2, "half"], ["grown-or-failed", NEIGHBOUR_MIB // 2, None]],
        "grower": [["half", GROWER_MIB, None], [None, grow, "grown-or-failed"]],
    }
    sync = Path(tempfile.mkdtemp(prefix=f"fence-{mode.value}-"))
    try:
        envs = {
            "neighbour": _env(mode, host, uuid, total, NEIGHBOUR_MIB, sync),
            "grower": _env(mode, host, uuid, total, GROWER_MIB, sync),
        }
        got = _run_pair(envs, phases, sync, ledger)
    finally:
        shutil.rmtree(sync, ignore_errors=True)
    grower, neighbour = got["grower"], got["neighbour"]
    if mode is IsolationMode.NONE:
        passed = grower["ok"] and not neighbour["ok"]
        why = "unfenced: the grower got its memory and the neighbour crashed" if passed else "the control did not crash"
    else:
        kind = classify_failure(grower.get("exc_type"), grower.get("message")).kind
        passed = neighbour["ok"] and not grower["ok"] and kind is FailureKind.CAP_OOM
        got_oom = kind.value if not grower["ok"] else "no OOM"
        why = f"grower: {got_oom}; neighbour: {'finished' if neighbour['ok'] else 'crashed'}"
    return Outcome(mode.value, passed, grower, neighbour, why)


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


def run(dry_run: bool) -> list[Outcome]:
    if dry_run:
        from carma_airflow.core.gpu import gpu_spec
        from carma_airflow.monitor.ledger import Ledger, sim_uuid

        folder = Path(tempfile.mkdtemp(prefix="fence-ledger-"))
        spec = gpu_spec("A100-40GB")
        ledger = Ledger(folder / "ledger.json")
        ledger.init([spec])
        host = HostIsolation("simulated")
        modes = (IsolationMode.FRAMEWORK, IsolationMode.NONE)
        return [scenario(m, host, sim_uuid(0), spec.memory_mib, str(ledger.path)) for m in modes]
    from carma_airflow.monitor.nvml import NvmlProbe

    sample = next(s for s in NvmlProbe().sample() if s.ok)
    outcomes = [scenario(m, HostIsolation("nvml"), sample.uuid, sample.memory_total_mib, None)
                for m in (IsolationMode.FRAMEWORK, IsolationMode.NONE)]  # fmt: skip
    pipe_dir = Path(tempfile.mkdtemp(prefix="carma-mps-"))
    if _mps_daemon(pipe_dir):
        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe_dir)
        try:
            host = HostIsolation("nvml", mps_daemon=True)
            outcomes.append(scenario(IsolationMode.MPS, host, sample.uuid, sample.memory_total_mib, None))
        finally:
            _mps_quit(pipe_dir)
    else:
        print("[fence] no MPS control daemon could be started here: the mps scenario is skipped")
    return outcomes


def main(dry_run: bool) -> int:
    outcomes = run(dry_run)
    for o in outcomes:
        print(f"[fence] {o.scenario}: {'PASS' if o.passed else 'FAIL'}: {o.why}")
        for role, r in (("grower", o.grower), ("neighbour", o.neighbour)):
            print(f"[fence]   {role}: ok={r['ok']} held {r.get('held_mib')} MiB {(r.get('message') or '')[:160]}")
    return 0 if outcomes and all(o.passed for o in outcomes) else 1


__all__ = ["Outcome", "main", "run", "scenario"]
