"""``python -m gpukit``: what bench/gpu/run.sh runs.  See bench/gpu/README.md."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpukit.workload import WorkloadError, kit_tasks, with_steps

DEFAULT_OUT = "out/gpu-kit"
OURS = "interference-aware"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpukit", description="carma's real-GPU validation kit")
    p.add_argument("command", nargs="?", default="run", choices=("run", "check", "fence"))
    p.add_argument("--dry-run", action="store_true", help="simulated GPUs and carma's synthetic workload")
    p.add_argument("--mode", choices=("light", "airflow"), default="light")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--sim-gpus", default="2xH200-141GB", help="simulated GPUs of --dry-run")
    p.add_argument("--scale", type=float, default=1.0, help="stretch every task's training time")
    p.add_argument("--sim-scale", type=float, default=0.15, help="simulated seconds per real second (--dry-run)")
    p.add_argument("--timeout", type=float, default=420.0, help="seconds each policy's run may take")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "fence" and args.dry_run:  # fenced collocation (gpukit/fence_check.py)
        from gpukit.fence_check import main as fence_main

        return fence_main(dry_run=True)
    if args.command == "check" or not args.dry_run:
        from gpukit.gpu_check import no_gpu_reason

        reason = no_gpu_reason()
        if args.command == "check":
            print(reason or "NVIDIA GPU found")
            return 3 if reason else 0
        if reason:
            print(reason)
            return 0
        if args.command == "fence":
            from gpukit.fence_check import main as fence_main

            return fence_main(dry_run=False)
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        if args.mode == "airflow":
            from gpukit.airflow_mode import run_airflow

            return run_airflow(args, out)
        return run_light(args, out)
    except WorkloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run_light(args: argparse.Namespace, out: Path) -> int:
    from carma_airflow.monitor.sampler import Monitor, make_probe
    from gpukit.driver import LightDriver, RunResult
    from gpukit.report import build_figures

    backend = "simulated" if args.dry_run else "nvml"
    ledger = out / "work" / "simulated-gpus.json"
    probe = make_probe(backend, args.sim_gpus, ledger)
    tick = 0.25 if args.dry_run else 0.5
    began = time.time()
    try:
        first = probe.sample()
        total = min(s.memory_total_mib for s in first if s.ok)
        tasks = kit_tasks(total, scale=args.scale)
        runs: list[RunResult] = []
        for policy in ("exclusive", OURS):
            if runs:  # the second run trains the steps the first one trained
                steps = {r.task: int(r.metrics["steps"]) for r in runs[0].tries if r.metrics.get("steps")}
                tasks = with_steps(tasks, steps)
            print(f"[kit] run {len(runs) + 1}/2: policy {policy}, {len(tasks)} tasks, {backend} backend", flush=True)
            driver = LightDriver(
                Monitor(probe, period_s=tick),
                policy,
                tasks,
                out / "work" / policy,
                backend=backend,
                ledger_path=ledger if args.dry_run else None,
                sim_scale=args.sim_scale,
                tick_s=tick,
                oom_retry_delay_s=0.3 if args.dry_run else 1.0,
                timeout_s=args.timeout,
            )
            runs.append(driver.run())
    finally:
        probe.close()
    kit = _kit_info(args, "light", backend, began, runs)
    fig = build_figures(runs[0], runs[1], kit)
    return _finish(fig, runs, out)


def _kit_info(args: argparse.Namespace, mode: str, backend: str, began: float, runs: list[Any]) -> dict[str, Any]:
    torch_version = next((r.metrics.get("torch") for run in runs for r in run.tries if r.metrics.get("torch")), None)
    return {
        "mode": mode,
        "backend": backend,
        "dry_run": bool(args.dry_run),
        "policies": ["exclusive", OURS],
        "scale": args.scale,
        "sim_scale": args.sim_scale if args.dry_run else None,
        "sim_gpus": args.sim_gpus if args.dry_run else None,
        "python": platform.python_version(),
        "torch": torch_version,
        "host": platform.node(),
        "started_at": datetime.fromtimestamp(began, tz=timezone.utc).isoformat(),
        "wall_s": time.time() - began,
    }


def _finish(fig: dict[str, Any], runs: list[Any], out: Path) -> int:
    from gpukit.report import summary_lines, write_figures, write_timeline

    path = write_figures(fig, out)
    png = write_timeline(
        runs, out / "timeline.png", f"carma GPU kit: {fig['kit']['mode']} mode, {fig['kit']['backend']}"
    )
    for line in summary_lines(fig):
        print(line)
    print(f"figures: {path}" + (f"   timeline: {png}" if png else ""))
    ok = all(not r.failed_tasks and not r.timed_out for r in runs)
    oom = fig["oom"]
    if oom["provoked"] and not oom["landed_safely"]:
        ok = False
    (out / "summary.txt").write_text("\n".join(summary_lines(fig)) + "\n")
    if not ok:
        print(f"[kit] not every task succeeded: {json.dumps([r.failed_tasks for r in runs])}", flush=True)
    return 0 if ok else 1
