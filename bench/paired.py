"""Two runs of ``bench/mixed_fleet.py`` compared cell by cell: is a change better than the cells' spread?

A change to the rule moves each cell of the mixed grid by up to 20 % either way (a decision early in a
day changes every decision after it), so two runs' counts of cells that meet a target differ by two or
three cells for changes that do not touch the rule at all (docs/placement.md, "How much of a count is
noise").  This reads two ``--json`` outputs of the same cells (a before and an after: a knob, or two
checkouts) and prints, per set (grid, fresh) and day:

* the default's mean JCT over most-free-memory's, geometric mean, before and after;
* the paired ratio: the geometric mean over cells of the default's mean JCT after over before, and
  its 90 % interval from resampling the cells (a bootstrap, seeded: the same files print the same);
  the same for the makespan;
* ``W`` (never worse than most-free-memory: mean JCT <= 1.00x, makespan <= 1.02x, nothing lost) before
  and after, and how many cells gained it and lost it;
* a verdict: ``better`` where the whole interval of the JCT ratio is below 1, ``worse`` where it is
  above, else ``within the spread`` (the change may still be better; these cells cannot tell).

``--by-cluster`` adds a line per cluster.  Both files must hold the same cells (the same command but
the knob or the tree); cells only one holds stop the comparison with their names.

    .venv/bin/python bench/mixed_fleet.py --fresh 24 --fresh-on each --json /tmp/before.json
    .venv/bin/python bench/mixed_fleet.py --fresh 24 --fresh-on each --knob NAME=VALUE --json /tmp/after.json
    .venv/bin/python bench/paired.py /tmp/before.json /tmp/after.json [--by-cluster]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DRAWS = 2_000  # bootstrap resamples
LEVEL = 0.90  # the interval's coverage


@dataclass(frozen=True)
class Cell:
    """One cell's figures in one file: the default's (``ct``) and most-free-memory's, as (mean JCT,
    makespan, lost)."""

    key: tuple[str, ...]
    group: str  # "grid" or "fresh"
    day: int
    cluster: str
    ct: tuple[float, float, float]
    mfm: tuple[float, float, float]

    @property
    def never_worse(self) -> bool:
        """The issue's W: mean JCT <= 1.00x mfm's, makespan <= 1.02x, nothing more lost."""
        return self.ct[0] <= self.mfm[0] and self.ct[1] <= 1.02 * self.mfm[1] and self.ct[2] <= self.mfm[2]


def load(path: Path) -> dict[tuple[str, ...], Cell]:
    """The cells of one ``bench/mixed_fleet.py --json`` file, by what names them."""
    try:
        data = json.loads(path.read_text())
        rows = data["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(
            f"{path}: not a bench/mixed_fleet.py --json file ({exc}); give one that command wrote"
        ) from exc
    out: dict[tuple[str, ...], Cell] = {}
    for row in rows:
        c = row["cell"]
        key = (c["cluster"], _speed(c["speed"]), c["truth"], c["trace"], str(c["day"]))
        runs = row["runs"]
        out[key] = Cell(
            key,
            "fresh" if c["trace"].startswith("f") else "grid",
            int(c["day"]),
            c["cluster"],
            tuple(runs["ct"]),  # type: ignore[arg-type]
            tuple(runs["mfm"]),  # type: ignore[arg-type]
        )
    return out


def _speed(speed: str) -> str:
    """A speed truth as it names its cells: a table's file by name (``table:PATH:SEED`` holds the
    checkout's path, which differs between two checkouts of the same bench)."""
    kind, _, rest = speed.partition(":")
    if kind != "table":
        return speed
    path, _, seed = rest.rpartition(":")
    return f"table:{Path(path).name}:{seed}" if path else f"table:{Path(rest).name}"


def geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def interval(ratios: Sequence[float], rng: random.Random) -> tuple[float, float]:
    """The geometric mean's ``LEVEL`` interval from ``DRAWS`` resamples of the cells."""
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    means = sorted(statistics.fmean(rng.choices(logs, k=n)) for _ in range(DRAWS))
    lo = means[int((1.0 - LEVEL) / 2 * DRAWS)]
    hi = means[min(DRAWS - 1, int((1.0 + LEVEL) / 2 * DRAWS))]
    return math.exp(lo), math.exp(hi)


def compare(before: dict[tuple[str, ...], Cell], after: dict[tuple[str, ...], Cell], label: str) -> str:
    """One line: the cells of one set and day (or cluster) before and after."""
    keys = sorted(before)
    b = [before[k] for k in keys]
    a = [after[k] for k in keys]
    rng = random.Random(20_261_207)  # the same files print the same intervals
    jct = [x.ct[0] / y.ct[0] for x, y in zip(a, b, strict=True)]
    span = [x.ct[1] / y.ct[1] for x, y in zip(a, b, strict=True)]
    lo, hi = interval(jct, rng)
    mlo, mhi = interval(span, rng)
    wb = sum(c.never_worse for c in b)
    wa = sum(c.never_worse for c in a)
    gained = sum(x.never_worse and not y.never_worse for x, y in zip(a, b, strict=True))
    lost = sum(y.never_worse and not x.never_worse for x, y in zip(a, b, strict=True))
    verdict = "better" if hi < 1.0 else "worse" if lo > 1.0 else "within the spread"
    return (
        f"{label:44} {len(keys):3} | {geomean([c.ct[0] / c.mfm[0] for c in b]):.3f} "
        f"{geomean([c.ct[0] / c.mfm[0] for c in a]):.3f} | {geomean(jct):.3f} [{lo:.3f}, {hi:.3f}] | "
        f"{geomean(span):.3f} [{mlo:.3f}, {mhi:.3f}] | {wb:2} -> {wa:2} (+{gained} -{lost}) | {verdict}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("before", type=Path, help="bench/mixed_fleet.py --json of the rule before")
    ap.add_argument("after", type=Path, help="the same cells' --json of the rule after")
    ap.add_argument("--by-cluster", action="store_true", help="also a line per cluster")
    args = ap.parse_args(argv)
    before, after = load(args.before), load(args.after)
    only = sorted(set(before) ^ set(after))
    if only:
        named = "; ".join(" ".join(k) for k in only[:4])
        raise SystemExit(
            f"the two files hold different cells ({len(only)} in one only, e.g. {named}): "
            "run both with the same --fresh, --fresh-on, --clusters and --quick"
        )
    print(
        f"{'cells':44} {'n':>3} | {'ct/mfm':11} | {'JCT after/before [90 %]':23} | "
        f"{'makespan after/before':23} | {'W (gained, lost)':17} | verdict"
    )
    groups = sorted({(c.group, c.day) for c in before.values()})
    for group, day in groups:
        sel = {k: c for k, c in before.items() if (c.group, c.day) == (group, day)}
        print(compare(sel, {k: after[k] for k in sel}, f"{group}, day {day}"))
        if args.by_cluster:
            for cluster in sorted({c.cluster for c in sel.values()}):
                part = {k: c for k, c in sel.items() if c.cluster == cluster}
                print(compare(part, {k: after[k] for k in part}, f"  {cluster}"))
    print(compare(before, after, "all"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
