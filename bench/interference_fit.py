"""How well the learned interference model predicts, before and after learning; what a decision costs.

Prints (never asserts; always exits 0):

1. **Prediction error.**  For each planted truth (``beta`` in 0.1 .. 1.2, and a truth whose real
   activities are 0.6x what the monitor reports, as NVML busy time over-states demand), draws
   ended tries from the sharing model's rule at that truth, with log-normal noise (5 %) and
   5 % outliers (a try stretched 3-8x by something else), and feeds the first N to
   ``InterferenceFit``.  The mean absolute error of the predicted speed (relative to solo) on
   2,000 held-out collocations is printed for the cold prior (beta 0.1, activity scale 1; issue
   19), a plain
   "no slowdown" guess (speed 1.0), and the fit after N = 10, 30, 100, 300 tries, with the
   learned coefficients, beta's range and the confidence; ratios are to the prior's error.
2. **Decision time on 8 GPUs.**  ``Placer.decide`` for one request over 8 A100s with one or two
   tenants each, activities known, for most-free-memory, interference-aware and predictive;
   median and p99 in microseconds and the ratio to most-free-memory.

Usage::

    .venv/bin/python bench/interference_fit.py           # full
    .venv/bin/python bench/interference_fit.py --quick   # fewer decisions (CI smoke run)

All randomness is seeded.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from carma_airflow.core import ClusterView, GpuState, MemoryNeed, MetricWindow, Placer, TaskRequest, Tenant, gpu_spec
from carma_airflow.core.activity import estimate_activity
from carma_airflow.core.interference import CollocationObservation, InterferenceFit, InterferenceModel, speed
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.predictive import Predictive

SIZES = (10, 30, 100, 300)
HELD_OUT = 2000
NOISE = 0.05
OUTLIERS = 0.05


@dataclass(frozen=True, slots=True)
class Truth:
    label: str
    beta: float
    activity_scale: float = 1.0  # real activity over the reported one


TRUTHS = (
    Truth("beta 0.1", 0.1),
    Truth("beta 0.3", 0.3),
    Truth("beta 0.5", 0.5),
    Truth("beta 0.8", 0.8),
    Truth("beta 1.2", 1.2),
    Truth("beta 0.5, act x0.6", 0.5, 0.6),
    Truth("beta 0.8, act x0.6", 0.8, 0.6),
)


def _collocation(rng: random.Random) -> tuple[float, tuple[float, ...]]:
    own = rng.uniform(0.1, 0.8)
    co = tuple(rng.uniform(0.1, 0.8) for _ in range(rng.choice((1, 1, 2))))
    return own, co


def _true_speed(truth: Truth, own: float, co: Sequence[float]) -> float:
    k = truth.activity_scale
    return speed(own * k, [a * k for a in co], truth.beta)


def _tries(truth: Truth, n: int, rng: random.Random) -> list[CollocationObservation]:
    out = []
    for _ in range(n):
        own, co = _collocation(rng)
        stretch = math.exp(rng.gauss(0.0, NOISE)) / _true_speed(truth, own, co)
        if rng.random() < OUTLIERS:
            stretch *= rng.uniform(3.0, 8.0)
        out.append(CollocationObservation.steady(stretch, own, co))  # the *reported* activities
    return out


def _mae(predict: InterferenceFit | None, truth: Truth, held_out: Sequence[tuple[float, tuple[float, ...]]]) -> float:
    errors = []
    for own, co in held_out:
        guess = 1.0 if predict is None else predict.speed(own, co)
        errors.append(abs(guess - _true_speed(truth, own, co)))
    return sum(errors) / len(errors)


def prediction_error() -> None:
    print("1. Prediction error of speed relative to solo (MAE on 2,000 held-out collocations)")
    print(f"   tries: {NOISE:.0%} log-normal noise, {OUTLIERS:.0%} outliers stretched 3-8x; ratio = MAE / prior's MAE")
    head = f"   {'truth':<20} {'prior':>7} {'no-slow':>8}"
    for n in SIZES:
        head += f" {'N=' + str(n):>14}"
    print(head + f"   at N={SIZES[-1]}: beta [range], activity scale, confidence, outliers left out")
    for seed, truth in enumerate(TRUTHS):
        rng = random.Random(seed)
        held_out = [_collocation(rng) for _ in range(HELD_OUT)]
        tries = _tries(truth, SIZES[-1], rng)
        prior = InterferenceFit.prior("a100-40gb")
        base = _mae(prior, truth, held_out)
        line = f"   {truth.label:<20} {base:7.3f} {_mae(None, truth, held_out):8.3f}"
        fit = prior
        for n in SIZES:
            fit = prior.observe_all(tries[:n])
            err = _mae(fit, truth, held_out)
            ratio = f"{err / base:4.2f}" if base > 1e-9 else "   -"
            line += f" {err:6.3f} ({ratio})"
        lo, hi = fit.beta_range
        line += (
            f"   {fit.beta:.2f} [{lo:.2f}, {hi:.2f}], {fit.activity_scale:.2f}, {fit.confidence:.2f}, {fit.outliers}"
        )
        print(line)
    print("   (N=10 is the minimum count: the fit leaves the prior there; below it predicts the prior exactly;")
    print("    the fit keeps its last 512 tries; ratio '-' where the truth is the prior itself)")


# -- decision time --------------------------------------------------------------------------


A100 = gpu_spec("A100-40GB")


def _view(rng: random.Random) -> ClusterView:
    gpus = []
    for i in range(8):
        k = rng.choice((1, 2))
        tenants = tuple(
            Tenant(
                f"g{i}t{j}",
                f"task{i}-{j}",
                6000,
                -1000.0,
                6000,
                activity=estimate_activity([rng.uniform(0.1, 0.8)] * 5),
            )
            for j in range(k)
        )
        used = 6000 * k
        window = MetricWindow.constant(0.2 + 0.2 * k, 0.15 * k, 0.1 * k)
        gpus.append(GpuState(f"GPU-{i}", i, A100, A100.memory_mib - used, used, window, tenants))
    return ClusterView(0.0, tuple(gpus))


def decision_time(decisions: int) -> None:
    print(f"\n2. One decision over 8 x A100-40GB, 1-2 tenants each ({decisions} decisions per policy)")
    rng = random.Random(3)
    cases = [
        (
            _view(rng),
            TaskRequest(
                "r", "newcomer", MemoryNeed(4000, "test"), activity=estimate_activity([rng.uniform(0.1, 0.8)] * 5)
            ),
        )
        for _ in range(decisions)
    ]
    results: dict[str, tuple[float, float]] = {}
    # predictive with a learned fit (per-task terms for the tenants' and newcomers' types) decides by
    # its predictions; at the cold prior it takes the default's order
    named = []
    for _ in range(300):
        own, co = _collocation(rng)
        names = tuple(f"task{rng.randrange(8)}-{rng.randrange(2)}" for _ in co)
        stretch = math.exp(rng.gauss(0.0, NOISE)) / speed(own, co, 0.5)
        named.append(CollocationObservation.steady(stretch, own, co, task="newcomer", co_tasks=names))
    learned = InterferenceModel({"a100-40gb": InterferenceFit.prior("a100-40gb").observe_all(named)})
    policies = {
        "most-free-memory": make_policy("most-free-memory"),
        "interference-aware": make_policy("interference-aware"),
        "predictive (prior)": make_policy("predictive"),
        "predictive (learned)": Predictive(learned),
    }
    for name, policy in policies.items():
        placer = Placer(policy)
        times = []
        gc.disable()
        for v, req in cases:
            t0 = time.perf_counter()
            placer.decide(req, v)
            times.append(time.perf_counter() - t0)
        gc.enable()
        times.sort()
        results[name] = (statistics.median(times) * 1e6, times[int(0.99 * (len(times) - 1))] * 1e6)
    ref = results["most-free-memory"][0]
    print(f"   {'policy':<20} {'median us':>10} {'p99 us':>10} {'median / most-free-memory':>27}")
    for name, (med, p99) in results.items():
        print(f"   {name:<20} {med:10.1f} {p99:10.1f} {med / ref:27.2f}")
    print("   (budget: 1 ms = 1000 us per decision)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer decisions")
    args = parser.parse_args(argv)
    prediction_error()
    decision_time(300 if args.quick else 3000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
