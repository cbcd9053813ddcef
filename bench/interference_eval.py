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
  the share of them within +-5 % of the measured speed;
* the pressure half of the terms: the model learned from observations that name the try's own
  task type only (what the executor recorded before issue 23: no co-tenant types, so no
  pressure is fitted), beside the same model learned with the co-tenants' types;
* whether ``confidence`` discriminates: the predictions sorted by confidence into fifths, the
  share of each fifth within +-5 % (the top fifth should hit clearly more often than the bottom
  one), for the confidence as it is and as it was before issue 23 (every residual pooled:
  ``TaskTerms.spread``), with the 90 % coverage of both side by side.

Two splits, each 5 folds assigned by a seeded shuffle:

* ``pair``: held out by *unordered pair of job types* (both directions of a pair, and repeated
  runs of it, are in the same fold): every held-out pair is new, its two job types are not;
* ``config``: held out by *job type* (configuration): a fold's test rows are those whose job is
  one of its types, and its training rows name none of its types (neither as job nor as
  partner): the job type has never been seen.

The training observations of a fold are fed in a seeded random order, as an executor would see
ended tries.

Input (``--table``, default ``shared/workloads/gavel_pairs.csv``), either form:

* long: ``job, partner, solo, shared`` (and optionally ``gpu``): one row per job beside a partner;
* wide: ``job_a, job_b, solo_a, solo_b, shared_a, shared_b`` (and optionally ``gpu``): one row per
  pair, as ``gavel_pairs.csv``.

No activity figures are in such tables; every job is given the same nominal reported activity
(``--activity``, 0.5): the pooled fit then predicts one speed per GPU and the saturation term
cannot act, so what the new model gains over it is its per-task terms.

    .venv/bin/python bench/interference_eval.py [--table T.csv] [--folds 5] [--seed 0]
        [--activity 0.5] [--split pair|config|both] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
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


QUINTILES = 5
KEYS_Q = ("hit_q", "hit_before_q", "hit_fold_q")  # pooled now, pooled before, within each fold now


@dataclass
class Scores:
    n: int = 0
    abs_new: float = 0.0
    abs_own_only: float = 0.0
    abs_today: float = 0.0
    abs_mean: float = 0.0
    abs_none: float = 0.0
    abs_cold_new: float = 0.0
    abs_cold_today: float = 0.0
    inside_new: int = 0
    inside_before: int = 0
    inside_today: int = 0
    within5: int = 0
    confidence: float = 0.0
    confidence_before: float = 0.0
    hits: list[tuple[float, bool]] = field(default_factory=list)  # (confidence, within +-5 %)
    hits_before: list[tuple[float, bool]] = field(default_factory=list)
    folds: list[int] = field(default_factory=list)  # the fold of each of ``hits``

    def row(self) -> dict[str, float]:
        n = max(1, self.n)
        out = {
            "n": float(self.n),
            "mae_new": self.abs_new / n,
            "mae_own_only": self.abs_own_only / n,
            "mae_today": self.abs_today / n,
            "mae_task_mean": self.abs_mean / n,
            "mae_none": self.abs_none / n,
            "mae_cold_new": self.abs_cold_new / n,
            "mae_cold_today": self.abs_cold_today / n,
            "coverage_new_90": self.inside_new / n,
            "coverage_before_90": self.inside_before / n,
            "coverage_today_95": self.inside_today / n,
            "mean_confidence": self.confidence / n,
            "mean_confidence_before": self.confidence_before / n,
            "within_5pct": self.within5 / n,
        }
        out["new_over_today"] = out["mae_new"] / out["mae_today"] if out["mae_today"] else math.nan
        out["new_over_none"] = out["mae_new"] / out["mae_none"] if out["mae_none"] else math.nan
        out["cold_new_over_none"] = out["mae_cold_new"] / out["mae_none"] if out["mae_none"] else math.nan
        for name, hits in (("hit_q", self.hits), ("hit_before_q", self.hits_before)):
            for q, rate in enumerate(quintile_hits(hits), start=1):
                out[f"{name}{q}"] = rate
        for q, rate in enumerate(within_fold_hits(self.hits, self.folds), start=1):
            out[f"hit_fold_q{q}"] = rate
        return out


def quintile_hits(hits: list[tuple[float, bool]]) -> list[float]:
    """The predictions sorted by confidence (ties in the order they came), in fifths, lowest
    first: the share of each fifth within +-5 %."""
    ordered = [hit for _, hit in sorted(hits, key=lambda h: h[0])]
    n = len(ordered)
    out = []
    for q in range(QUINTILES):
        part = ordered[q * n // QUINTILES : (q + 1) * n // QUINTILES]
        out.append(sum(part) / len(part) if part else math.nan)
    return out


def within_fold_hits(hits: list[tuple[float, bool]], folds: list[int]) -> list[float]:
    """As :func:`quintile_hits`, each prediction put in its fifth by its confidence among its own
    fold's predictions (one model's, as a deployment ranks what it predicts), the fifths then
    pooled over the folds.  Pooled over folds, confidence also compares models fitted on different
    types: where the types are few, a fold whose training types are alike (a sure model) holds out
    the unlike ones, so its sure predictions miss more (the ``--synthetic`` table shows it)."""
    by_fold: dict[int, list[tuple[float, bool]]] = {}
    for fold, scored in zip(folds, hits, strict=True):
        by_fold.setdefault(fold, []).append(scored)
    counts, inside = [0] * QUINTILES, [0] * QUINTILES
    for part in by_fold.values():
        ordered = [inside_5 for _, inside_5 in sorted(part, key=lambda h: h[0])]
        for rank, inside_5 in enumerate(ordered):
            q = rank * QUINTILES // len(ordered)
            counts[q] += 1
            inside[q] += inside_5
    return [inside[q] / counts[q] if counts[q] else math.nan for q in range(QUINTILES)]


def synthetic_pairs(types: int, seed: int) -> pd.DataFrame:
    """A table of the model's own form (long rows, one GPU ``synthetic``): every job beside every
    partner, log speed ``-0.6 (1 + u_job + v_partner)`` plus noise (sd 0.04), ``u`` and ``v``
    drawn per type (sd 0.35).  Nothing in it favours one fold's model over another's but which
    types the split holds out: what ``--split config`` shows on it comes of the split."""
    rng = random.Random(seed)
    names = [f"type{i:03d}" for i in range(types)]
    u = {n: rng.gauss(0.0, 0.35) for n in names}
    v = {n: rng.gauss(0.0, 0.35) for n in names}
    rows = []
    for job in names:
        for partner in names:
            speed_ = math.exp(min(0.0, -0.6 * (1.0 + u[job] + v[partner]) + rng.gauss(0.0, 0.04)))
            pair = " | ".join(sorted((job, partner)))
            rows.append({"gpu": "synthetic", "job": job, "partner": partner, "speed": speed_, "pair": pair})
    return pd.DataFrame(rows)


def folds_of(records: list[tuple[str, str, float, str]], split: str, folds: int, rng: random.Random) -> list[Fold]:
    """(train, test) per fold of a split (see the module doc)."""
    if split == "pair":
        pairs = sorted({r[3] for r in records})
        rng.shuffle(pairs)
        fold_of = {p: i % folds for i, p in enumerate(pairs)}
        return [
            ([r for r in records if fold_of[r[3]] != k], [r for r in records if fold_of[r[3]] == k])
            for k in range(folds)
        ]
    if split == "config":
        jobs = sorted({r[0] for r in records} | {r[1] for r in records})
        rng.shuffle(jobs)
        fold_of = {j: i % folds for i, j in enumerate(jobs)}
        return [
            (
                [r for r in records if fold_of[r[0]] != k and fold_of[r[1]] != k],
                [r for r in records if fold_of[r[0]] == k],
            )
            for k in range(folds)
        ]
    raise SystemExit(f"error: unknown split {split!r}; use pair or config")


Fold = tuple[list[tuple[str, str, float, str]], list[tuple[str, str, float, str]]]


def pooled_spread(fit: InterferenceFit, activity: float, job: str, partner: str) -> tuple[float, float, float]:
    """The interval (low, high) and confidence as they were before issue 23: every leave-one-out
    residual pooled, widened only by the terms' variance (``TaskTerms.spread``)."""
    p = fit.predict(activity, (activity,), job, (partner,))
    if fit.terms is None:
        return p.low, p.high, p.confidence
    g = math.log1p(fit.beta * fit.activity_scale * activity)
    _, variance = fit.terms.multiplier(job, (partner,), (activity,))
    lo, hi, confidence = fit.terms.spread(g, variance, fit.settings.interval_level)
    return p.speed * math.exp(lo), p.speed * math.exp(hi), confidence


def evaluate_gpu(
    rows: pd.DataFrame, *, folds: int, seed: int, activity: float, split: str = "pair"
) -> dict[str, float]:
    rng = random.Random(seed)
    records = list(rows[["job", "partner", "speed", "pair"]].itertuples(index=False, name=None))
    scores = Scores()
    cold_new = InterferenceFit.prior("x", NEW).predict(activity, (activity,)).speed
    cold_today = InterferenceFit.prior("x", TODAY).predict(activity, (activity,)).speed
    for fold, (train, test) in enumerate(folds_of(records, split, folds, rng)):
        if not train or not test:
            continue
        rng.shuffle(train)
        new = InterferenceFit.prior("x", NEW).observe_all(observation(j, p, s, activity, True) for j, p, s, _ in train)
        own_only = InterferenceFit.prior("x", NEW).observe_all(
            CollocationObservation.steady(1.0 / s, activity, (activity,), task=j) for j, _, s, _ in train
        )
        today = InterferenceFit.prior("x", TODAY).observe_all(
            observation(j, p, s, activity, False) for j, p, s, _ in train
        )
        per_task: dict[str, list[float]] = {}
        for j, _, s, _ in train:
            per_task.setdefault(j, []).append(s)
        overall = statistics.fmean(s for _, _, s, _ in train)
        for job, partner, seen, _ in test:
            p = new.predict(activity, (activity,), job, (partner,))
            b_low, b_high, b_confidence = pooled_spread(new, activity, job, partner)
            t_point = today.speed(activity, (activity,))
            if today.covariance is not None:
                se = log_speed_stderr(activity, (activity,), today.beta, today.activity_scale, today.covariance)
                t_low, t_high = t_point * math.exp(-2 * se), min(1.0, t_point * math.exp(2 * se))
            else:
                t_low = speed(activity, (activity,), TODAY.beta_upper, TODAY.scale_upper)
                t_high = 1.0
            task_mean = statistics.fmean(per_task[job]) if job in per_task else overall
            hit = abs(seen / p.speed - 1.0) <= 0.05
            scores.n += 1
            scores.abs_new += abs(p.speed - seen)
            scores.abs_own_only += abs(own_only.predict(activity, (activity,), job, (None,)).speed - seen)
            scores.abs_today += abs(t_point - seen)
            scores.abs_mean += abs(task_mean - seen)
            scores.abs_none += abs(1.0 - seen)
            scores.abs_cold_new += abs(cold_new - seen)
            scores.abs_cold_today += abs(cold_today - seen)
            scores.inside_new += p.low <= seen <= p.high
            scores.inside_before += b_low <= seen <= b_high
            scores.inside_today += t_low <= seen <= t_high
            scores.within5 += hit
            scores.confidence += p.confidence
            scores.confidence_before += b_confidence
            scores.hits.append((p.confidence, hit))
            scores.hits_before.append((b_confidence, hit))
            scores.folds.append(fold)
    return scores.row()


def evaluate(
    table: pd.DataFrame, *, folds: int = 5, seed: int = 0, activity: float = 0.5, split: str = "pair"
) -> dict[str, dict[str, float]]:
    return {
        str(gpu): evaluate_gpu(rows, folds=folds, seed=seed, activity=activity, split=split)
        for gpu, rows in sorted(table.groupby("gpu"), key=lambda kv: str(kv[0]))
    }


COLUMNS = (
    ("n", "n", "{:.0f}"),
    ("mae_new", "MAE new", "{:.3f}"),
    ("mae_own_only", "own type", "{:.3f}"),
    ("mae_today", "today", "{:.3f}"),
    ("mae_task_mean", "task mean", "{:.3f}"),
    ("mae_none", "none", "{:.3f}"),
    ("mae_cold_new", "cold new", "{:.3f}"),
    ("mae_cold_today", "cold today", "{:.3f}"),
    ("new_over_today", "new/today", "{:.2f}"),
    ("new_over_none", "new/none", "{:.2f}"),
    ("coverage_new_90", "cover 90%", "{:.1%}"),
    ("coverage_before_90", "was 90%", "{:.1%}"),
    ("coverage_today_95", "today 95%", "{:.1%}"),
    ("mean_confidence", "confidence", "{:.2f}"),
    ("mean_confidence_before", "was conf", "{:.2f}"),
    ("within_5pct", "within 5%", "{:.2f}"),
)


def weighted(results: dict[str, dict[str, float]]) -> dict[str, float]:
    """Every GPU's figures weighted by its held-out count (the table as one figure)."""
    total = sum(r["n"] for r in results.values()) or 1.0
    keys = [k for k in next(iter(results.values())) if k != "n"]
    out = {k: sum(r[k] * r["n"] for r in results.values()) / total for k in keys}
    out["n"] = total
    return out


def print_split(split: str, results: dict[str, dict[str, float]]) -> None:
    widths = [max(len(h), 9) for _, h, _ in COLUMNS]
    print(f"split {split}: MAE of speed; 'own type': learned without co-tenant types (no pressure)")
    print(f"{'gpu':<8}" + " ".join(f"{h:>{w}}" for (_, h, _), w in zip(COLUMNS, widths, strict=True)))
    rows = {**results, "all": weighted(results)} if len(results) > 1 else results
    for gpu, r in rows.items():
        print(f"{gpu:<8}" + " ".join(f"{f.format(r[k]):>{w}}" for (k, _, f), w in zip(COLUMNS, widths, strict=True)))
    print(
        f"split {split}: share within +-5 % per fifth of predictions by confidence (lowest first), "
        "now | before | now, fifths within each fold's own model"
    )
    for gpu, r in results.items():
        now, was, fold = (" ".join(f"{r[f'{k}{q}']:.2f}" for q in range(1, QUINTILES + 1)) for k in KEYS_Q)
        print(f"  {gpu:<8} {now}   |   {was}   |   {fold}")


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


def quintile_target(results: dict[str, dict[str, float]]) -> list[tuple[str, bool]]:
    """The top fifth by confidence hits within +-5 % clearly more often than the bottom fifth:
    at least 1.5x as often and 0.05 more (per GPU)."""
    out = []
    for gpu, r in results.items():
        lo, hi = r["hit_q1"], r[f"hit_q{QUINTILES}"]
        ok = hi >= max(1.5 * lo, lo + 0.05)
        out.append((f"{gpu}: top fifth by confidence hits +-5 % more than the bottom ({hi:.2f} vs {lo:.2f})", ok))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", default=str(DEFAULT_TABLE))
    ap.add_argument("--synthetic", type=int, default=0, metavar="TYPES", help="a table of the model's form instead")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--activity", type=float, default=0.5)
    ap.add_argument("--split", choices=("pair", "config", "both"), default="both")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    table = synthetic_pairs(args.synthetic, args.seed) if args.synthetic else load_pairs(args.table)
    if args.synthetic:
        args.table = f"synthetic table of {args.synthetic} types (seed {args.seed})"
    splits = ("pair", "config") if args.split == "both" else (args.split,)
    print(
        f"{args.table}: {len(table)} observations, {table['pair'].nunique()} unordered pairs; "
        f"{args.folds} folds, seed {args.seed}, nominal activity {args.activity}"
    )
    every = {}
    met: list[tuple[str, bool]] = []
    for split in splits:
        results = evaluate(table, folds=args.folds, seed=args.seed, activity=args.activity, split=split)
        every[split] = results
        print_split(split, results)
        if split == "pair":
            met += targets(results)
        met += [(f"{split}: {text}", ok) for text, ok in quintile_target(results)]
    print(f"targets met: {sum(ok for _, ok in met)} of {len(met)}")
    for text, ok in met:
        print(f"  [{'x' if ok else ' '}] {text}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        first = every[splits[0]]
        Path(args.json).write_text(json.dumps({"table": args.table, "results": first, "splits": every}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
