"""CPU time of the default's cold and steady passes per placement (issue 44's pass budget: a cold
pass within 50 us per placement), optionally side by side with another checkout of the project.

A cold pass is a driver's first scheduling pass over a deep queue on idle GPUs (the placer then
places as many tries as fit); it is timed per placement, and on the mixed fleet also as a whole
with 32 free slots (Airflow's default parallelism: the pass places no more).  The steady pass is a driver's next
heartbeat on a mostly full cluster (``bench/speed.py``'s ``bench_heartbeat``).  Both on 1,024
GPUs with 10,000 waiting of the packaged catalogue's types, completion-time told their run times:

* ``one model``: 1,024 A100-40GB, tenants and tries typed (as the executor's intake types them);
* ``mixed``: section 2c of ``bench/speed.py`` (hosts in turn H100-80GB, A100-40GB, L4, L4; run
  times per type and model).

CPU time (``time.process_time``), the median of ``--runs`` passes, each on a cycle of its own
built untimed.  ``--against DIR``: the same measurement on the checkout at DIR (a worktree of the
commit before a change), in alternating subprocesses (``--rounds`` of each), so both see the same
load; the figures are the medians over every pass of each checkout.

    .venv/bin/python bench/cold_pass.py
    git worktree add -f /tmp/before HEAD~1
    .venv/bin/python bench/cold_pass.py --against /tmp/before
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from carma_airflow.core.cycle import CycleResult
    from carma_airflow.core.gpu import GpuState

HERE = Path(__file__).resolve().parent
GPUS, WAITING = 1024, 10_000
SLOTS = 32  # a driver's free slots (Airflow's default parallelism): the pass places no more
CASES = (
    "one model, cold",
    "mixed, cold",
    f"mixed, cold, {SLOTS} free slots",
    "one model, steady heartbeat",
    "mixed, steady heartbeat",
)


def measure(runs: int, gpus: int, waiting: int) -> dict[str, list[float]]:
    """Per case its passes' CPU seconds (cold without a slot limit: per placement), with the
    placements as ``<case> placed``.  Imports the project found first on ``sys.path`` (the
    checkout measured)."""
    import speed  # that checkout's bench/speed.py: the views, queue and cycles of section 2c

    from carma_airflow.sim import load_catalog, packaged

    catalog = load_catalog(packaged("task_catalog.csv"))
    pending = speed.typed_requests(speed.catalog_requests(catalog, waiting), catalog)
    solo = speed.per_model_runs(catalog)
    out: dict[str, list[float]] = {}
    for case in CASES:
        mixed, steady = case.startswith("mixed"), case.endswith("heartbeat")
        limit = SLOTS if case.endswith("free slots") else None
        view = speed.typed_view(
            speed.mixed_view(gpus, steady=steady) if mixed else speed.large_view(gpus, steady=steady), catalog
        )
        runs_by = solo if mixed else None
        times, placed = [], []
        if steady:
            cycle = speed._new_cycle(view, pending, "completion-time", catalog, solo_runs=runs_by)
            results = [cycle.run(speed.NOW, speed._bare(view))]
            for _ in range(runs):
                for p in results[-1].placed:  # put back: every pass decides over the same GPUs and queue
                    cycle.release(p.request.key)
                    cycle.submit(p.request, p.request.submitted_at)
                seconds, result = _cpu(cycle.run, speed.NOW, speed._bare(view))
                results.append(result)
                times.append(seconds)
                placed.append(float(len(result.placed)))
        else:
            bare = speed._bare(view)
            for _ in range(runs):
                cycle = speed._new_cycle(view, pending, "completion-time", catalog, solo_runs=runs_by)
                seconds, result = _cpu(cycle.run, speed.NOW, bare, limit)
                times.append(seconds / max(1, len(result.placed)) if _per_placement(case) else seconds)
                placed.append(float(len(result.placed)))
        out[case], out[f"{case} placed"] = times, placed
    return out


def _cpu(
    run: Callable[..., CycleResult], now: float, gpus: list[GpuState], limit: int | None = None
) -> tuple[float, CycleResult]:
    """CPU seconds of one ``SchedulingCycle.run`` (after a collection, untimed) and its result."""
    gc.collect()
    t0 = time.process_time()
    result = run(now, gpus, limit=limit)
    return time.process_time() - t0, result


def _worker(tree: Path, runs: int, gpus: int, waiting: int) -> dict[str, list[float]]:
    """:func:`measure` in a subprocess that imports the checkout at ``tree``."""
    code = (
        "import json, sys; "
        f"sys.path[:0] = [{str(tree)!r}, {str(tree / 'bench')!r}, {str(HERE)!r}]; "
        "import cold_pass; "
        f"print(json.dumps(cold_pass.measure({runs}, {gpus}, {waiting})))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tree)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _figure(case: str, values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median * 1e6:.1f} us" if _per_placement(case) else f"{median * 1e3:.1f} ms"


def _per_placement(case: str) -> bool:
    return case.endswith("cold")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="passes per case and round")
    parser.add_argument("--rounds", type=int, default=1, help="subprocesses per checkout, alternating")
    parser.add_argument("--against", type=Path, help="another checkout, measured side by side (before)")
    parser.add_argument("--gpus", type=int, default=GPUS)
    parser.add_argument("--waiting", type=int, default=WAITING)
    args = parser.parse_args(argv)
    trees = {"this": HERE.parent}
    if args.against is not None:
        trees = {"before": args.against.resolve(), "after": HERE.parent}
    got: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for case, values in _worker(tree, args.runs, args.gpus, args.waiting).items():
                got[name].setdefault(case, []).extend(values)
    names = list(trees)
    print(f"CPU time, median of {args.runs * args.rounds} passes; {args.gpus} GPUs, {args.waiting} waiting")
    rows = [("pass", *names, *(["after/before"] if len(names) == 2 else []))]
    for case in CASES:
        label = f"{case}: {'per placement' if _per_placement(case) else 'pass'}"
        row = [label, *(_figure(case, got[n][case]) for n in names)]
        if len(names) == 2:
            row.append(f"{statistics.median(got['after'][case]) / statistics.median(got['before'][case]):.2f}")
        rows.append(tuple(row))
        placed = [f"{statistics.median(got[n][f'{case} placed']):.0f}" for n in names]
        rows.append((f"{case}: placed", *placed, *([""] if len(names) == 2 else [])))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print(
            "  ".join(
                f"{v:<{w}}" if c == 0 else f"{v:>{w}}" for c, (v, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if k == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
