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
    p.add_argument("command", nargs="?", default="run", choices=("run", "check", "fence", "nvml-cost"))
    p.add_argument("--dry-run", action="store_true", help="simulated GPUs and carma's synthetic workload")
    p.add_argument("--mode", choices=("light", "airflow"), default="light")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--sim-gpus", default="2xH200-141GB", help="simulated GPUs of --dry-run")
    p.add_argument("--scale", type=float, default=1.0, help="stretch every task's training time")
    p.add_argument("--sim-scale", type=float, default=0.15, help="simulated seconds per real second (--dry-run)")
    p.add_argument("--timeout", type=float, default=420.0, help="seconds each policy's run may take")
    p.add_argument(
        "--policies",
        default=f"exclusive,{OURS}",
        help=f"comma-separated policies, run in this order; the first is the baseline (default exclusive,{OURS}); "
        "more than two adds a side-by-side table (compare.json, compare.txt)",
    )
    return p


def policies_of(args: argparse.Namespace) -> list[str]:
    """``--policies`` as a list: at least two, none twice (the first is the baseline)."""
    names = [n.strip() for n in str(args.policies).split(",") if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise WorkloadError(
            f"--policies needs at least two different policies, the baseline first "
            f"(e.g. exclusive,most-free-memory,completion-time), not {args.policies!r}"
        )
    from carma_airflow.core.errors import CarmaError
    from carma_airflow.core.policies import make_policy

    for name in names:
        try:
            make_policy(name)
        except CarmaError as exc:
            raise WorkloadError(f"--policies: {exc}") from None
    return names


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "fence" and args.dry_run:  # fenced collocation (gpukit/fence_check.py)
        from gpukit.fence_check import main as fence_main

        return fence_main(dry_run=True)
    if args.command == "nvml-cost" and args.dry_run:  # NVML calls per kind (gpukit/nvml_cost.py)
        from gpukit.nvml_cost import main as cost_main

        return cost_main(dry_run=True, out=Path(args.out).resolve())
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
        if args.command == "nvml-cost":
            from gpukit.nvml_cost import main as cost_main

            return cost_main(dry_run=False, out=Path(args.out).resolve())
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        policies_of(args)
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
        policies = policies_of(args)
        for policy in policies:
            if runs:  # every later run trains the steps the first one trained
                steps = {r.task: int(r.metrics["steps"]) for r in runs[0].tries if r.metrics.get("steps")}
                tasks = with_steps(tasks, steps)
            print(
                f"[kit] run {len(runs) + 1}/{len(policies)}: policy {policy}, {len(tasks)} tasks, {backend} backend",
                flush=True,
            )
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
    fig = build_figures(runs[0], runs[-1], kit)
    return _finish(fig, runs, out)


def _kit_info(args: argparse.Namespace, mode: str, backend: str, began: float, runs: list[Any]) -> dict[str, Any]:
    torch_version = next((r.metrics.get("torch") for run in runs for r in run.tries if r.metrics.get("torch")), None)
    return {
        "mode": mode,
        "backend": backend,
        "dry_run": bool(args.dry_run),
        "policies": [run.policy for run in runs],
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
    """Print and write the figures: the baseline against the last policy (figures.json,
    summary.txt), every run's timeline, and with more than two policies all side by side
    (compare.json, compare.txt).  0 when every run succeeded, the OOM's retry landed and no
    truthfully declared task crashed under the last policy (the one under test; victims under
    the others, e.g. memory-only most-free-memory, are a figure of the comparison)."""
    from gpukit.compare import compare_lines, side_by_side, write_compare
    from gpukit.report import summary_lines, write_figures, write_timeline

    path = write_figures(fig, out)
    png = write_timeline(
        runs, out / "timeline.png", f"carma GPU kit: {fig['kit']['mode']} mode, {fig['kit']['backend']}"
    )
    for line in summary_lines(fig):
        print(line)
    cmp = side_by_side(runs, fig["kit"])
    compared = write_compare(cmp, out)
    if len(runs) > 2:
        for line in compare_lines(cmp):
            print(line)
    print(f"figures: {path}" + (f"   timeline: {png}" if png else "") + f"   side by side: {compared}")
    ok = all(not r.failed_tasks and not r.timed_out for r in runs)
    if cmp["victims"]:
        print(f"[kit] victims: {json.dumps({p: c['victims'] for p, c in cmp['runs'].items() if c['victims']})}")
    if cmp["runs"][runs[-1].policy]["victims"]:
        ok = False
    oom = fig["oom"]
    if oom["provoked"] and not oom["landed_safely"]:
        ok = False
    (out / "summary.txt").write_text("\n".join(summary_lines(fig)) + "\n")
    if not ok:
        print(f"[kit] not every task succeeded: {json.dumps([r.failed_tasks for r in runs])}", flush=True)
    return 0 if ok else 1
