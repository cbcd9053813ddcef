"""Plots: a per-GPU timeline per policy and a bar chart of ratios to exclusive (matplotlib)."""

from __future__ import annotations

from pathlib import Path

from carma_airflow.sim.compare import Comparison


def plot_comparison(comparison: Comparison, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = (comparison.baseline, *comparison.results)
    n_gpu = len(comparison.baseline.integrals)
    fig, axes = plt.subplots(
        len(runs) + 1,
        1,
        figsize=(12, 1.2 + 0.35 * n_gpu * len(runs) + 3),
        squeeze=False,
        gridspec_kw={"height_ratios": [max(1.0, 0.35 * n_gpu)] * len(runs) + [3.0]},
    )
    span = max(r.makespan_s for r in runs) / 3600.0
    cmap = plt.get_cmap("tab20")
    for ax, run in zip(axes[:-1, 0], runs, strict=True):
        lanes: dict[int, list[tuple[float, float]]] = {}
        for e in run.timeline:
            for gpu in e.gpus:
                depth = sum(1 for a, b in lanes.get(gpu, []) if a < e.end and e.start < b)
                lanes.setdefault(gpu, []).append((e.start, e.end))
                color = "black" if e.outcome == "oom" else cmap(e.job_id % 20)
                height = 0.8 / 3
                ax.broken_barh(
                    [(e.start / 3600, (e.end - e.start) / 3600)],
                    (gpu - 0.4 + (depth % 3) * height, height * 0.95),
                    color=color,
                )
        ax.set_yticks(range(n_gpu))
        ax.set_yticklabels([f"GPU {i}" for i in range(n_gpu)], fontsize=7)
        ax.set_xlim(0, span)
        ax.set_title(
            f"{run.policy} ({run.estimator}, {run.queue}): makespan {run.makespan_s / 3600:.2f} h, "
            f"{run.oom_crashes} OOM crashes",
            fontsize=9,
            loc="left",
        )
    axes[-2, 0].set_xlabel("hours (black: try that crashed with CUDA OOM)")
    rows = comparison.rows()[1:]
    bar = axes[-1, 0]
    names = [r["policy"] for r in rows]
    keys = [("makespan_s_ratio", "makespan"), ("energy_kwh_ratio", "energy"), ("sm_activity_mean_ratio", "SM activity")]
    width = 0.8 / len(keys)
    for k, (key, label) in enumerate(keys):
        bar.bar([i + k * width for i in range(len(rows))], [r[key] or 0 for r in rows], width, label=label)
    bar.axhline(1.0, color="black", linewidth=0.8)
    bar.set_xticks([i + width for i in range(len(rows))])
    bar.set_xticklabels(names, rotation=20, fontsize=8)
    bar.set_ylabel("ratio to exclusive")
    bar.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
