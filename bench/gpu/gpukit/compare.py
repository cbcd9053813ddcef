"""Several policies side by side (``--policies exclusive,most-free-memory,completion-time``).

The first policy is the baseline (exclusive: every task alone).  For every policy: makespan,
energy, tries, CUDA OOMs, victims, collocated tries, and each task's training time of the same
steps; then each policy against the baseline and against ``most-free-memory`` (what a platform
team would otherwise run: memory-only sharing), as ratios: makespan, energy, per-task
slowdown.  A *victim* is a try of a task that declared its memory truthfully (any but the
underdeclared one) and still crashed: what sharing must never cost.  Written as
``compare.json`` and printed as ``compare.txt``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gpukit.driver import RunResult
from gpukit.report import _f, gpu_figures

UNDERDECLARED = "underdeclared"  # the one task that declares less than it uses (workload.py)
MEMORY_ONLY = "most-free-memory"


def _train_s(run: RunResult) -> dict[str, float]:
    return {
        r.task: float(r.metrics["train_s"])
        for r in run.tries
        if r.outcome == "success" and isinstance(r.metrics.get("train_s"), (int, float))
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def policy_figures(run: RunResult) -> dict[str, Any]:
    gpu = gpu_figures(run)
    crashed = [r for r in run.tries if r.outcome in ("oom", "failed")]
    return {
        "policy": run.policy,
        "makespan_s": run.makespan_s,
        "energy_j": gpu["energy_j"],
        "mean_sm_activity": gpu["mean_sm_activity"],
        "mean_memory_used_mib": gpu["mean_memory_used_mib"],
        "tasks_succeeded": len({r.task for r in run.tries if r.outcome == "success"}),
        "tries": len(run.tries),
        "ooms": sum(1 for r in run.tries if r.outcome == "oom"),
        "victims": sorted(f"{r.task}#{r.try_number}" for r in crashed if r.task != UNDERDECLARED),
        "collocated_tries": sum(1 for r in run.tries if r.collocated),
        "failed_tasks": run.failed_tasks,
        "timed_out": run.timed_out,
        "train_s": _train_s(run),
    }


def _against(mine: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    slow = {task: t / base["train_s"][task] for task, t in mine["train_s"].items() if base["train_s"].get(task)}
    return {
        "makespan_ratio": _ratio(mine["makespan_s"], base["makespan_s"]),
        "energy_ratio": _ratio(mine["energy_j"], base["energy_j"]),
        "slowdown": dict(sorted(slow.items())),
        "mean_slowdown": sum(slow.values()) / len(slow) if slow else None,
        "max_slowdown": max(slow.values()) if slow else None,
    }


def side_by_side(runs: list[RunResult], kit: dict[str, Any]) -> dict[str, Any]:
    """Every run's figures, and each against the first (the baseline) and most-free-memory."""
    per = {run.policy: policy_figures(run) for run in runs}
    baseline = runs[0].policy
    against: dict[str, dict[str, Any]] = {}
    for run in runs[1:]:
        mine = per[run.policy]
        against[run.policy] = {baseline: _against(mine, per[baseline])}
        if MEMORY_ONLY in per and run.policy != MEMORY_ONLY:
            against[run.policy][MEMORY_ONLY] = _against(mine, per[MEMORY_ONLY])
    return {
        "kit": kit,
        "baseline": baseline,
        "policies": [run.policy for run in runs],
        "runs": per,
        "against": against,
        "victims": sum(len(p["victims"]) for p in per.values()),
    }


def compare_lines(cmp: dict[str, Any]) -> list[str]:
    names: list[str] = cmp["policies"]
    per = cmp["runs"]
    width = max(18, *(len(n) + 1 for n in names))
    head = f"{'figure':26}" + "".join(f"{n:>{width}}" for n in names)
    lines = [f"== side by side ({cmp['kit']['mode']} mode, {cmp['kit']['backend']} backend)", head]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"{label:26}" + "".join(f"{c:>{width}}" for c in cells))

    row("makespan (s)", [_f(per[n]["makespan_s"], ".1f") for n in names])
    row("energy (J)", [_f(per[n]["energy_j"], ".0f") for n in names])
    row("mean SM activity", [_f(per[n]["mean_sm_activity"], ".2f") for n in names])
    row("mean memory used (MiB)", [_f(per[n]["mean_memory_used_mib"], ".0f") for n in names])
    row("tasks succeeded / tries", [f"{per[n]['tasks_succeeded']} / {per[n]['tries']}" for n in names])
    row("collocated tries", [str(per[n]["collocated_tries"]) for n in names])
    row("CUDA OOMs", [str(per[n]["ooms"]) for n in names])
    row("victims", [str(len(per[n]["victims"])) for n in names])
    for policy, bases in cmp["against"].items():
        for base, a in bases.items():
            lines.append(
                f"{policy} vs {base}: makespan {_f(a['makespan_ratio'], '.2f')}x, "
                f"energy {_f(a['energy_ratio'], '.2f')}x, mean slowdown {_f(a['mean_slowdown'], '.2f')}, "
                f"max slowdown {_f(a['max_slowdown'], '.2f')}"
            )
    tasks = sorted({t for n in names for t in per[n]["train_s"]})
    lines.append(f"{'train s (same steps)':26}" + "".join(f"{n:>{width}}" for n in names))
    for task in tasks:
        row(f"  {task}", [_f(per[n]["train_s"].get(task), ".1f") for n in names])
    lines.append(
        f"victims (tries of truthfully declared tasks that crashed): {cmp['victims']} "
        + json.dumps({n: per[n]["victims"] for n in names if per[n]["victims"]})
    )
    return lines


def write_compare(cmp: dict[str, Any], out: Path) -> Path:
    path = out / "compare.json"
    path.write_text(json.dumps(cmp, indent=2, sort_keys=True))
    (out / "compare.txt").write_text("\n".join(compare_lines(cmp)) + "\n")
    return path
