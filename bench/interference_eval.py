"""The interference model against measured pairs: held-out error and interval coverage, per GPU.

Reads any table of measured collocations and prints, per GPU, side by side:

* mean absolute error (MAE) of the predicted speed (shared / solo) on held-out pairs for the new
  model (per-task terms over the pooled fit, ``InterferenceFit`` as it is now), for today's fit
  (issue 13's: pooled beta and k only, two-sided outliers, prior beta 0.5, window 128), for a
  per-task mean that ignores the partner, for "no interference" (speed 1.0), and for the cold
  priors (the new one and today's, before any observation);
* the ratios new / today and new / none (targets: at most 0.75 x today, below 1.0 x none);
* the share of held-out observations inside the nominal 90 % intervals (target 85-95 %), and
  today's ~95 % ranges for comparison;
* what ``confidence`` promises against what happens: the mean confidence of the predictions, and
  the share of them within +-5 % of the measured speed.

Folds: 5, held out by *unordered pair of job types* (both directions of a pair, and repeated
runs of it, are in the same fold), assigned by a seeded shuffle.  The training observations of a
fold are fed in a seeded random order, as an executor would see ended tries.

Input (``--table``, default ``shared/workloads/gavel_pairs.csv``), either form:

* long: ``job, partner, solo, shared`` (and optionally ``gpu``): one row per job beside a partner;
* wide: ``job_a, job_b, solo_a, solo_b, shared_a, shared_b`` (and optionally ``gpu``): one row per
  pair, as ``gavel_pairs.csv``.

No activity figures are in such tables; every job is given the same nominal reported activity
(``--activity``, 0.5): the pooled fit then predicts one speed per GPU and the saturation term
cannot act, so what the new model gains over it is its per-task terms.

    .venv/bin/python bench/interference_eval.py [--table T.csv] [--folds 5] [--seed 0]
        [--activity 0.5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from carma_airflow.core.interference import (  # noqa: E402
    CollocationObservation,
    InterferenceFit,
    InterferenceSettings,
    speed,
)
from carma_airflow.core.interference_estimate import log_speed_stderr  # noqa: E402

DEFAULT_TABLE = ROOT.parent / "shared" / "workloads" / "gavel_pairs.csv"
# issue 13's fit, as it was: the calibration's prior, outliers on both sides, the last 128 tries
TODAY = InterferenceSettings(
    cold_beta=0.5, prior_confidence=0.5, one_sided_outliers=False, task_terms=False, window=128
)
NEW = InterferenceSettings()


def load_pairs(path: str | Path) -> pd.DataFrame:
    """The table as long rows: gpu, job, partner, speed (shared / solo)."""
    df = pd.read_csv(path)
    cols = set(df.columns)
    if "gpu" not in cols:
        df["gpu"] = "all"
    if {"job", "partner", "solo", "shared"} <= cols:
        long = df[["gpu", "job", "partner", "solo", "shared"]].copy()
    elif {"job_a", "job_b", "solo_a", "solo_b", "shared_a", "shared_b"} <= cols:
        a = df.rename(columns={"job_a": "job", "job_b": "partner", "solo_a": "solo", "shared_a": "shared"})
        b = df.rename(columns={"job_b": "job", "job_a": "partner", "solo_b": "solo", "shared_b": "shared"})
        long = pd.concat(
            [a[["gpu", "job", "partner", "solo", "shared"]], b[["gpu", "job", "partner", "solo", "shared"]]]
        )
    else:
        raise SystemExit(
            f"error: {path}: need columns job,partner,solo,shared or job_a,job_b,solo_a,solo_b,shared_a,shared_b"
        )
    long = long[(long["solo"] > 0) & (long["shared"] > 0)].copy()
    long["speed"] = long["shared"] / long["solo"]
    long["pair"] = [" | ".join(sorted((str(j), str(p)))) for j, p in zip(long["job"], long["partner"], strict=True)]
    return long.reset_index(drop=True)


def observation(job: str, partner: str, speed_: float, activity: float, named: bool) -> CollocationObservation:
    return CollocationObservation.steady(
        1.0 / speed_, activity, (activity,), task=job if named else "", co_tasks=(partner,) if named else ()
    )


@dataclass
class Scores:
    n: int = 0
    abs_new: float = 0.0
    abs_today: float = 0.0
    abs_mean: float = 0.0
    abs_none: float = 0.0
    abs_cold_new: float = 0.0
    abs_cold_today: float = 0.0
    inside_new: int = 0
    inside_today: int = 0
    within5: int = 0
    confidence: float = 0.0

    def row(self) -> dict[str, float]:
        n = max(1, self.n)
        out = {
            "n": float(self.n),
            "mae_new": self.abs_new / n,
            "mae_today": self.abs_today / n,
            "mae_task_mean": self.abs_mean / n,
            "mae_none": self.abs_none / n,
            "mae_cold_new": self.abs_cold_new / n,
            "mae_cold_today": self.abs_cold_today / n,
            "coverage_new_90": self.inside_new / n,
            "coverage_today_95": self.inside_today / n,
            "mean_confidence": self.confidence / n,
            "within_5pct": self.within5 / n,
        }
        out["new_over_today"] = out["mae_new"] / out["mae_today"] if out["mae_today"] else math.nan
        out["new_over_none"] = out["mae_new"] / out["mae_none"] if out["mae_none"] else math.nan
        out["cold_new_over_none"] = out["mae_cold_new"] / out["mae_none"] if out["mae_none"] else math.nan
        return out


def evaluate_gpu(rows: pd.DataFrame, *, folds: int, seed: int, activity: float) -> dict[str, float]:
    rng = random.Random(seed)
    pairs = sorted(set(rows["pair"]))
    rng.shuffle(pairs)
    fold_of = {p: i % folds for i, p in enumerate(pairs)}
    scores = Scores()
    cold_new = InterferenceFit.prior("x", NEW).predict(activity, (activity,)).speed
    cold_today = InterferenceFit.prior("x", TODAY).predict(activity, (activity,)).speed
    records = list(rows[["job", "partner", "speed", "pair"]].itertuples(index=False, name=None))
    for k in range(folds):
        train = [r for r in records if fold_of[r[3]] != k]
        test = [r for r in records if fold_of[r[3]] == k]
        if not train or not test:
            continue
        rng.shuffle(train)
        new = InterferenceFit.prior("x", NEW).observe_all(observation(j, p, s, activity, True) for j, p, s, _ in train)
        today = InterferenceFit.prior("x", TODAY).observe_all(
            observation(j, p, s, activity, False) for j, p, s, _ in train
        )
        per_task: dict[str, list[float]] = {}
        for j, _, s, _ in train:
            per_task.setdefault(j, []).append(s)
        overall = statistics.fmean(s for _, _, s, _ in train)
        for job, partner, seen, _ in test:
            p = new.predict(activity, (activity,), job, (partner,))
            t_point = today.speed(activity, (activity,))
            if today.covariance is not None:
                se = log_speed_stderr(activity, (activity,), today.beta, today.activity_scale, today.covariance)
                t_low, t_high = t_point * math.exp(-2 * se), min(1.0, t_point * math.exp(2 * se))
            else:
                t_low = speed(activity, (activity,), TODAY.beta_upper, TODAY.scale_upper)
                t_high = 1.0
            task_mean = statistics.fmean(per_task[job]) if job in per_task else overall
            scores.n += 1
            scores.abs_new += abs(p.speed - seen)
            scores.abs_today += abs(t_point - seen)
            scores.abs_mean += abs(task_mean - seen)
            scores.abs_none += abs(1.0 - seen)
            scores.abs_cold_new += abs(cold_new - seen)
            scores.abs_cold_today += abs(cold_today - seen)
            scores.inside_new += p.low <= seen <= p.high
            scores.inside_today += t_low <= seen <= t_high
            scores.within5 += abs(seen / p.speed - 1.0) <= 0.05
            scores.confidence += p.confidence
    return scores.row()


def evaluate(
    table: pd.DataFrame, *, folds: int = 5, seed: int = 0, activity: float = 0.5
) -> dict[str, dict[str, float]]:
    return {
        str(gpu): evaluate_gpu(rows, folds=folds, seed=seed, activity=activity)
        for gpu, rows in sorted(table.groupby("gpu"), key=lambda kv: str(kv[0]))
    }


COLUMNS = (
    ("n", "n", "{:.0f}"),
    ("mae_new", "MAE new", "{:.3f}"),
    ("mae_today", "today", "{:.3f}"),
    ("mae_task_mean", "task mean", "{:.3f}"),
    ("mae_none", "none", "{:.3f}"),
    ("mae_cold_new", "cold new", "{:.3f}"),
    ("mae_cold_today", "cold today", "{:.3f}"),
    ("new_over_today", "new/today", "{:.2f}"),
    ("new_over_none", "new/none", "{:.2f}"),
    ("coverage_new_90", "cover 90%", "{:.1%}"),
    ("coverage_today_95", "today 95%", "{:.1%}"),
    ("mean_confidence", "confidence", "{:.2f}"),
    ("within_5pct", "within 5%", "{:.2f}"),
)


def targets(results: dict[str, dict[str, float]]) -> list[tuple[str, bool]]:
    out = []
    for gpu, r in results.items():
        out.append((f"{gpu}: MAE <= 0.75 x today's ({r['new_over_today']:.2f})", r["new_over_today"] <= 0.75))
        out.append((f"{gpu}: MAE below no interference ({r['new_over_none']:.2f})", r["new_over_none"] < 1.0))
        out.append(
            (f"{gpu}: 90 % intervals cover 85-95 % ({r['coverage_new_90']:.1%})", 0.85 <= r["coverage_new_90"] <= 0.95)
        )
        out.append(
            (f"{gpu}: cold prior no worse than none ({r['cold_new_over_none']:.2f})", r["cold_new_over_none"] <= 1.0)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", default=str(DEFAULT_TABLE))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--activity", type=float, default=0.5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    table = load_pairs(args.table)
    results = evaluate(table, folds=args.folds, seed=args.seed, activity=args.activity)
    print(
        f"{args.table}: {len(table)} observations, {table['pair'].nunique()} unordered pairs; "
        f"{args.folds} folds by pair, seed {args.seed}, nominal activity {args.activity}"
    )
    widths = [max(len(h), 9) for _, h, _ in COLUMNS]
    print(f"{'gpu':<8}" + " ".join(f"{h:>{w}}" for (_, h, _), w in zip(COLUMNS, widths, strict=True)))
    for gpu, r in results.items():
        print(f"{gpu:<8}" + " ".join(f"{f.format(r[k]):>{w}}" for (k, _, f), w in zip(COLUMNS, widths, strict=True)))
    met = targets(results)
    print(f"targets met: {sum(ok for _, ok in met)} of {len(met)}")
    for text, ok in met:
        print(f"  [{'x' if ok else ' '}] {text}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"table": args.table, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
