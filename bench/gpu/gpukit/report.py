"""Figures of the two runs (exclusive, then ours): JSON, a printed summary and a PNG timeline.

Per run: makespan (first start to last end), mean SM activity / occupancy / DRAM activity and
memory used over that span (mean of the GPUs' sample means), energy (difference of NVML's total
energy counter, summed over GPUs; integrated power where the counter is missing).  Across runs:
makespan ratio (ours / exclusive), energy ratio, per-task slowdown (training time of the same
steps, ours / exclusive).  The OOM: the crashed try, the planner's reason, where the retry
landed and how it ended.  Sampling cost: CPU and wall time per monitor sample.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpukit.driver import RunResult, SampleRow, TryRecord


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _span(run: RunResult) -> tuple[float, float]:
    starts = [r.started_s for r in run.tries]
    ends = [r.ended_s for r in run.tries if r.ended_s is not None]
    return (min(starts), max(ends)) if starts and ends else (0.0, 0.0)


def _energy_j(rows: list[SampleRow]) -> float | None:
    """Energy of one GPU over its rows: counter difference, else trapezoids of power."""
    counted = [r for r in rows if r.energy_j is not None]
    if len(counted) >= 2:
        return float(counted[-1].energy_j or 0.0) - float(counted[0].energy_j or 0.0)
    powered = [r for r in rows if r.power_w is not None]
    if len(powered) < 2:
        return None
    return sum(
        (b.t - a.t) * (float(a.power_w or 0.0) + float(b.power_w or 0.0)) / 2.0 for a, b in itertools.pairwise(powered)
    )


def gpu_figures(run: RunResult) -> dict[str, Any]:
    lo, hi = _span(run)
    inside = [s for s in run.samples if lo <= s.t <= hi]
    by_gpu: dict[str, list[SampleRow]] = {}
    for s in inside:
        by_gpu.setdefault(s.uuid, []).append(s)

    def per_gpu_mean(attr: str) -> float | None:
        means = [_mean([float(v) for r in rows if (v := getattr(r, attr)) is not None]) for rows in by_gpu.values()]
        known = [m for m in means if m is not None]
        return _mean(known)

    energies = [_energy_j(rows) for rows in by_gpu.values()]
    known_energy = [e for e in energies if e is not None]
    used = [float(s.used_mib) for s in inside]
    totals = {s.uuid: s.total_mib for s in inside}
    return {
        "mean_sm_activity": per_gpu_mean("smact"),
        "mean_sm_occupancy": per_gpu_mean("smocc"),
        "mean_dram_activity": per_gpu_mean("drama"),
        "mean_busy": per_gpu_mean("busy"),
        "activity_source": sorted({s.source for s in inside}),
        "mean_memory_used_mib": per_gpu_mean("used_mib"),
        "peak_memory_used_mib": max(used) if used else None,
        "mean_memory_used_share": _mean([float(s.used_mib) / totals[s.uuid] for s in inside if totals.get(s.uuid)]),
        "mean_power_w": per_gpu_mean("power_w"),
        "energy_j": sum(known_energy) if known_energy else None,
        "samples": len(inside),
    }


def _successful(run: RunResult) -> dict[str, TryRecord]:
    return {r.task: r for r in run.tries if r.outcome == "success"}


def shared_with(run: RunResult, rec: TryRecord) -> list[str]:
    """Tasks whose tries overlapped ``rec`` in time on one of its GPUs."""
    end = rec.ended_s if rec.ended_s is not None else math.inf
    out = set()
    for other in run.tries:
        if other is rec or set(other.gpu_uuids).isdisjoint(rec.gpu_uuids):
            continue
        other_end = other.ended_s if other.ended_s is not None else math.inf
        if other.started_s < end and rec.started_s < other_end:
            out.add(other.task)
    return sorted(out)


def per_task(exclusive: RunResult, ours: RunResult) -> list[dict[str, Any]]:
    base, mine = _successful(exclusive), _successful(ours)
    rows = []
    for name in sorted(set(base) | set(mine)):
        b, m = base.get(name), mine.get(name)
        bt = float(b.metrics["train_s"]) if b and "train_s" in b.metrics else None
        mt = float(m.metrics["train_s"]) if m and "train_s" in m.metrics else None
        rows.append(
            {
                "task": name,
                "exclusive_train_s": bt,
                "ours_train_s": mt,
                "steps": (m.metrics.get("steps") if m else None) or (b.metrics.get("steps") if b else None),
                "slowdown": (mt / bt) if bt and mt else None,
                "sim_slowdown": m.metrics.get("sim_slowdown") if m else None,
                "ours_shared_with": shared_with(ours, m) if m else [],
                "ours_gpu": m.gpu_indices if m else None,
            }
        )
    return rows


def _free_at(run: RunResult, uuid: str, t: float) -> int | None:
    """Free memory of a GPU at the last sample at or before ``t``."""
    best: SampleRow | None = None
    for s in run.samples:
        if s.uuid == uuid and s.t <= t + 1e-6 and (best is None or s.t >= best.t):
            best = s
    return None if best is None else best.total_mib - best.used_mib


def oom_figures(run: RunResult) -> dict[str, Any]:
    crashed = [r for r in run.tries if r.outcome == "oom"]
    if not crashed:
        return {"provoked": False}
    first = crashed[0]
    later = sorted(
        (r for r in run.tries if r.task == first.task and r.try_number > first.try_number), key=lambda r: r.try_number
    )
    final = later[-1] if later else None
    retry = later[0] if later else None

    def describe(r: TryRecord) -> dict[str, Any]:
        return {
            "try": r.try_number,
            "gpu": r.gpu_indices,
            "gpu_uuids": r.gpu_uuids,
            "request_mib": r.request_mib,
            "started_s": r.started_s,
            "ended_s": r.ended_s,
            "outcome": r.outcome,
            "peak_mib": r.peak_mib,
            "co_tenants": r.co_tenants,
            "gpu_free_at_start_mib": _free_at(run, r.gpu_uuids[0], r.started_s) if r.gpu_uuids else None,
            "placement": r.summary,
        }

    return {
        "provoked": True,
        "task": first.task,
        "ooms": len(crashed),
        "first_try": {**describe(first), "message": (first.message or "")[:300], "recovery": first.recovery},
        "retry": describe(retry) if retry else None,
        "final": describe(final) if final else None,
        "landed_safely": bool(final and final.outcome == "success"),
        "retry_on_other_gpu": bool(retry and set(retry.gpu_uuids).isdisjoint(first.gpu_uuids)),
        # what recovery promises: the retry does not start beside what crashed it. On another GPU, or on
        # the same one once the crash's co-tenants had left (on a loaded machine the hog can end first)
        "retry_clear_of_crash": bool(
            retry
            and (set(retry.gpu_uuids).isdisjoint(first.gpu_uuids) or set(retry.co_tenants).isdisjoint(first.co_tenants))
        ),
    }


def build_figures(exclusive: RunResult, ours: RunResult, kit: dict[str, Any]) -> dict[str, Any]:
    gx, go = gpu_figures(exclusive), gpu_figures(ours)
    tasks = per_task(exclusive, ours)
    slow = [t["slowdown"] for t in tasks if t["slowdown"] is not None]
    ratio = ours.makespan_s / exclusive.makespan_s if exclusive.makespan_s > 0 else None
    e_ratio = go["energy_j"] / gx["energy_j"] if gx["energy_j"] and go["energy_j"] is not None else None
    cpu = exclusive.sample_cpu_s + ours.sample_cpu_s
    wall = exclusive.sample_wall_s + ours.sample_wall_s
    count = exclusive.sample_count + ours.sample_count

    def run_dict(run: RunResult, gpu: dict[str, Any]) -> dict[str, Any]:
        return {
            "policy": run.policy,
            "makespan_s": run.makespan_s,
            "tasks_succeeded": len(_successful(run)),
            "tries": len(run.tries),
            "ooms": sum(1 for r in run.tries if r.outcome == "oom"),
            "failed_tasks": run.failed_tasks,
            "timed_out": run.timed_out,
            "collocated_tries": sum(1 for r in run.tries if r.collocated),
            "gpu": gpu,
            "try_list": [{k: v for k, v in asdict(r).items() if k != "log"} for r in run.tries],
        }

    return {
        "kit": kit,
        "gpus": exclusive.gpus,
        "runs": {"exclusive": run_dict(exclusive, gx), "ours": run_dict(ours, go)},
        "comparison": {
            "makespan_ratio": ratio,
            "makespan_s": {"exclusive": exclusive.makespan_s, "ours": ours.makespan_s},
            "energy_ratio": e_ratio,
            "mean_sm_activity": {"exclusive": gx["mean_sm_activity"], "ours": go["mean_sm_activity"]},
            "mean_sm_occupancy": {"exclusive": gx["mean_sm_occupancy"], "ours": go["mean_sm_occupancy"]},
            "mean_memory_used_mib": {"exclusive": gx["mean_memory_used_mib"], "ours": go["mean_memory_used_mib"]},
            "per_task": tasks,
            "mean_slowdown": _mean(slow),
            "max_slowdown": max(slow) if slow else None,
        },
        "oom": oom_figures(ours),
        "sampling": {
            "backend": exclusive.backend,
            "samples": count,
            "cpu_ms_per_sample": 1000.0 * cpu / count if count else None,
            "wall_ms_per_sample": 1000.0 * wall / count if count else None,
            "gpus_per_sample": len(exclusive.gpus),
        },
    }


# -- printing --------------------------------------------------------------------------------


def _f(value: Any, fmt: str = ".2f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{fmt}}{unit}"


def summary_lines(fig: dict[str, Any]) -> list[str]:
    kit, cmp, runs = fig["kit"], fig["comparison"], fig["runs"]
    ex, ours = runs["exclusive"], runs["ours"]
    gpus = ", ".join(f"{g['index']}: {g['name']} ({g['memory_total_mib'] / 1024:.0f} GiB)" for g in fig["gpus"])
    lines = [
        f"== carma GPU kit ({kit['mode']} mode, {kit['backend']} backend{', DRY RUN' if kit['dry_run'] else ''}) "
        f"on {gpus}",
        f"{'figure':34} {'exclusive':>12} {ours['policy']:>20}",
        f"{'makespan (s)':34} {_f(ex['makespan_s'], '.1f'):>12} {_f(ours['makespan_s'], '.1f'):>20}",
        f"{'tasks succeeded / tries':34} {ex['tasks_succeeded']:>7} / {ex['tries']:<2} "
        f"{ours['tasks_succeeded']:>15} / {ours['tries']:<2}",
        f"{'collocated tries':34} {ex['collocated_tries']:>12} {ours['collocated_tries']:>20}",
    ]
    for key, label, fmt in (
        ("mean_sm_activity", "mean SM activity", ".2f"),
        ("mean_sm_occupancy", "mean SM occupancy", ".2f"),
        ("mean_busy", "mean busy (NVML utilization)", ".2f"),
        ("mean_memory_used_mib", "mean memory used (MiB)", ".0f"),
        ("peak_memory_used_mib", "peak memory used (MiB)", ".0f"),
        ("mean_power_w", "mean power (W)", ".0f"),
        ("energy_j", "energy (J)", ".0f"),
    ):
        lines.append(f"{label:34} {_f(ex['gpu'][key], fmt):>12} {_f(ours['gpu'][key], fmt):>20}")
    lines.append(f"activity source: {', '.join(ex['gpu']['activity_source']) or 'none'}")
    lines.append(
        f"makespan ratio ours/exclusive: {_f(cmp['makespan_ratio'], '.2f')}   "
        f"energy ratio: {_f(cmp['energy_ratio'], '.2f')}   "
        f"mean slowdown: {_f(cmp['mean_slowdown'], '.2f')}   max slowdown: {_f(cmp['max_slowdown'], '.2f')}"
    )
    lines.append(
        f"{'task':20} {'excl train s':>12} {'ours train s':>12} {'slowdown':>9} {'steps':>7} shared GPU with (ours)"
    )
    for t in cmp["per_task"]:
        lines.append(
            f"{t['task']:20} {_f(t['exclusive_train_s'], '.1f'):>12} {_f(t['ours_train_s'], '.1f'):>12} "
            f"{_f(t['slowdown'], '.2f'):>9} {_f(t['steps'], 'd') if t['steps'] else '-':>7} "
            f"{', '.join(t['ours_shared_with']) or '-'}"
        )
    oom = fig["oom"]
    if oom["provoked"]:
        first, retry = oom["first_try"], oom["retry"]
        lines.append(
            f"CUDA OOM: {oom['task']} try {first['try']} on GPU {first['gpu']} beside {first['co_tenants']} "
            f"(asked {first['request_mib']} MiB, reached {first['peak_mib']} MiB, "
            f"{_f(first['gpu_free_at_start_mib'], 'd')} MiB free at start)"
        )
        lines.append(f"  recovery: {first['recovery']}")
        if retry:
            lines.append(
                f"  retry: try {retry['try']} on GPU {retry['gpu']} asking {retry['request_mib']} MiB "
                f"({_f(retry['gpu_free_at_start_mib'], 'd')} MiB free at start): {oom['final']['outcome']}; "
                f"landed safely: {oom['landed_safely']}, other GPU: {oom['retry_on_other_gpu']}, "
                f"clear of the crash's co-tenants: {oom['retry_clear_of_crash']}"
            )
    else:
        lines.append("CUDA OOM: none happened (the scenario did not provoke one)")
    s = fig["sampling"]
    lines.append(
        f"monitor sampling ({s['backend']}, {s['gpus_per_sample']} GPU(s)): "
        f"{_f(s['cpu_ms_per_sample'], '.2f')} ms CPU, "
        f"{_f(s['wall_ms_per_sample'], '.2f')} ms wall per sample over {s['samples']} samples"
    )
    return lines


# -- files -----------------------------------------------------------------------------------


def write_figures(fig: dict[str, Any], out: Path) -> Path:
    path = out / "figures.json"
    path.write_text(json.dumps(fig, indent=2, sort_keys=True))
    return path


def write_timeline(runs: list[RunResult], path: Path, title: str) -> Path | None:
    """Per-GPU timelines of each run (bars per try, black: CUDA OOM; line: SM activity)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[kit] matplotlib is not installed: no timeline PNG (figures.json has every try)", flush=True)
        return None
    horizon = max((r.ended_s or 0.0) for run in runs for r in run.tries) if any(run.tries for run in runs) else 1.0
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.2 + 1.4 * len(runs[0].gpus) * len(runs)), squeeze=False)
    cmap = plt.get_cmap("tab10")
    names = sorted({r.task for run in runs for r in run.tries})
    for ax, run in zip(axes[:, 0], runs, strict=True):
        uuids = [g["uuid"] for g in run.gpus]
        lanes: dict[str, list[tuple[float, float]]] = {u: [] for u in uuids}
        for r in sorted(run.tries, key=lambda r: r.started_s):
            end = r.ended_s if r.ended_s is not None else horizon
            for u in r.gpu_uuids:
                if u not in lanes:
                    continue
                depth = sum(1 for a, b in lanes[u] if a < end and r.started_s < b)
                lanes[u].append((r.started_s, end))
                y = uuids.index(u) - 0.42 + (depth % 3) * 0.22
                color = "black" if r.outcome == "oom" else cmap(names.index(r.task) % 10)
                ax.broken_barh([(r.started_s, end - r.started_s)], (y, 0.2), color=color)
                label = (
                    f"{r.task}"
                    + (f" #{r.try_number}" if r.try_number > 1 else "")
                    + (" OOM" if r.outcome == "oom" else "")
                )
                ax.text(
                    r.started_s + 0.1,
                    y + 0.1,
                    label,
                    fontsize=6,
                    va="center",
                    color="white" if r.outcome == "oom" else "black",
                )
        for i, u in enumerate(uuids):
            rows = [s for s in run.samples if s.uuid == u and s.smact is not None]
            if rows:
                ax.plot(
                    [s.t for s in rows], [i + 0.45 - 0.25 * float(s.smact or 0.0) for s in rows], color="grey", lw=0.7
                )
        ax.set_yticks(range(len(uuids)))
        ax.set_yticklabels([f"GPU {g['index']}" for g in run.gpus])
        ax.set_ylim(len(uuids) - 0.5, -0.5)
        ax.set_xlim(0, horizon * 1.02)
        ax.set_title(f"{run.policy}: makespan {run.makespan_s:.1f} s", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the run started (black: try that hit CUDA OOM; grey: SM activity)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
