"""How fast each task type truly runs on each GPU model: the simulator's speed truth.

Kept apart from the interference truth (:mod:`carma_airflow.sim.truth`), and combinable with every
one of them: a try's rate is its speed on its GPUs over its slowdown from co-tenants, and a try on
several GPUs goes at its slowest GPU's speed.  The placer never reads it; what it knows of speed
it learns from run times.  Chosen with ``SimConfig.speed_truth`` (``carma simulate --speed-truth``):

* ``alike`` (the default): every model runs every task at the trace's solo speed, as before
  speed truths existed, so results on any cluster are the same as without them.
* ``spec[:SEED]``: from the spec sheets (:mod:`carma_airflow.core.speed`): per task type a seeded
  share of compute-bound work (uniform in [``LOW_SHARE``, ``HIGH_SHARE``]), the rest memory-bound;
  its speed on a model is the roofline ratio of the model's dense BF16/FP16 throughput and memory
  bandwidth to the reference's.
* ``table:PATH[:SEED]``: measured solo throughputs, rows ``gpu,job,solo`` or ``gavel_pairs.csv``'s
  form (its ``solo_a``/``solo_b`` columns), mapped onto the trace's task types the way the ``pairs``
  interference truth maps them (each task type is given one of the table's jobs, seeded with the
  same stream: with the same SEED and an unfiltered pair table a task type plays the same job in
  both).  A task's speed on a model is its job's measured throughput on the table GPU that model
  plays over that on the table GPU the reference plays: ratios kept as measured.  Which table GPU a
  model plays: the one of its name (``V100`` for ``V100-32GB``) where the table names every model of
  the cluster, else by rank: the cluster's models from slowest to fastest by spec (throughput, then
  bandwidth) spread over the table's GPUs from slowest to fastest (by their median throughput
  ratio), the slowest on the slowest and the fastest on the fastest.  A job the table lacks on a
  GPU moves by the median ratio of the jobs measured on both.

The reference (speed 1.0, where a trace's ``solo_minutes`` hold) is the cluster's fastest model by
spec: on a cluster of one model every truth runs every task at the trace's speed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.speed import fastest, spec_speed

LOW_SHARE, HIGH_SHARE = 0.1, 0.9  # the drawn compute share of a task type's step time


class SpeedTruth(Protocol):
    @property
    def name(self) -> str: ...

    def speed(self, task: str, spec: GpuSpec) -> float:
        """The task type's speed on the model, relative to the reference (1.0: the trace's solo speed)."""
        ...


@dataclass(frozen=True, slots=True)
class AlikeSpeed:
    """Every model alike (the default)."""

    name: str = "alike"

    def speed(self, task: str, spec: GpuSpec) -> float:
        return 1.0


ALIKE = AlikeSpeed()


@dataclass(frozen=True, slots=True)
class SpecSpeed:
    """Per task type a compute share; speeds from the spec sheets (a type not listed: half compute)."""

    reference: GpuSpec
    compute_share: Mapping[str, float]
    name: str = "spec"

    def speed(self, task: str, spec: GpuSpec) -> float:
        return spec_speed(spec, self.reference, self.compute_share.get(task, 0.5))


def drawn_spec(types: Sequence[str], gpus: Sequence[GpuSpec], seed: int = 0) -> SpecSpeed:
    """Compute shares drawn per task type (seeded, one stream per type), reference the fastest model."""
    shares = {n: random.Random(f"speed:{seed}:{n}").uniform(LOW_SHARE, HIGH_SHARE) for n in sorted(set(types))}
    return SpecSpeed(fastest(gpus), shares, f"spec:{seed}")


@dataclass(frozen=True, slots=True)
class TableSpeed:
    """Measured speeds per (task type, model name); a pair not listed runs at 1.0."""

    speeds: Mapping[tuple[str, str], float]
    name: str = "table"

    def speed(self, task: str, spec: GpuSpec) -> float:
        return self.speeds.get((task, spec.name), 1.0)


def read_solo_table(path: str | Path) -> dict[tuple[str, str], float]:
    """(job, table GPU) -> median solo throughput, from ``gpu,job,solo`` rows or gavel_pairs.csv's form."""
    import pandas as pd  # the simulator may use pandas; core may not

    df = pd.read_csv(path)
    cols = set(df.columns)
    got: dict[tuple[str, str], list[float]] = {}
    if {"gpu", "job", "solo"} <= cols:
        rows = zip(df["job"], df["gpu"], df["solo"], strict=True)
        for job, gpu, solo in rows:
            got.setdefault((str(job), str(gpu)), []).append(float(solo))
    elif {"gpu", "job_a", "job_b", "solo_a", "solo_b"} <= cols:
        for gpu, ja, jb, sa, sb in zip(df["gpu"], df["job_a"], df["job_b"], df["solo_a"], df["solo_b"], strict=True):
            got.setdefault((str(ja), str(gpu)), []).append(float(sa))
            got.setdefault((str(jb), str(gpu)), []).append(float(sb))
    else:
        raise ValueError(f"{path}: need columns gpu,job,solo or gpu,job_a,job_b,solo_a,solo_b (gavel_pairs.csv)")
    out = {k: statistics.median(v) for k, v in got.items() if all(math.isfinite(x) and x > 0 for x in v)}
    if not out:
        raise ValueError(f"{path}: no positive solo throughputs")
    return out


def _ratio(solo: Mapping[tuple[str, str], float], jobs: Sequence[str], job: str, a: str, b: str) -> float:
    """Throughput of ``job`` on table GPU ``a`` over that on ``b``; the median over jobs measured on
    both where ``job`` lacks either (1.0 where none has both)."""
    if a == b:
        return 1.0
    x, y = solo.get((job, a)), solo.get((job, b))
    if x is not None and y is not None:
        return x / y
    both = [solo[(j, a)] / solo[(j, b)] for j in jobs if (j, a) in solo and (j, b) in solo]
    return statistics.median(both) if both else 1.0


def _plays(models: Sequence[GpuSpec], tables: Sequence[str], solo: Mapping[tuple[str, str], float]) -> dict[str, str]:
    """Which table GPU each cluster model plays (see the module doc)."""
    by_name: dict[str, str] = {}
    for m in models:
        lower = m.name.lower()
        for t in tables:
            tl = t.lower()
            if lower == tl or lower.startswith(tl + "-"):
                by_name[m.name] = t
                break
    if len(by_name) == len(models):
        return by_name
    jobs = sorted({j for j, _ in solo})
    base = max(tables, key=lambda t: (sum(1 for j in jobs if (j, t) in solo), t))
    rank = sorted(tables, key=lambda t: (_ratio(solo, jobs, "", t, base) if t != base else 1.0, t))
    ordered = sorted(models, key=lambda s: (s.dense_tflops, s.memory_gbs, s.name))
    if len(ordered) == 1:
        return {ordered[0].name: rank[-1]}
    last = len(rank) - 1
    return {m.name: rank[round(i * last / (len(ordered) - 1))] for i, m in enumerate(ordered)}


def solo_table(path: str | Path, types: Sequence[str], gpus: Sequence[GpuSpec], seed: int = 0) -> TableSpeed:
    """A measured solo table (see the module doc) mapped onto ``types`` and the cluster's models, seeded."""
    if not gpus:
        raise ValueError("a speed table needs the cluster's GPUs")
    solo = read_solo_table(path)
    jobs = sorted({j for j, _ in solo})
    tables = sorted({g for _, g in solo})
    models = list({s.name: s for s in gpus}.values())
    plays = _plays(models, tables, solo)
    ref = plays[fastest(models).name]
    speeds: dict[tuple[str, str], float] = {}
    for n in sorted(set(types)):
        job = random.Random(f"pairs:{seed}:{n}").choice(jobs)  # as the pairs truth gives a type its job
        for m in models:
            speeds[(n, m.name)] = _ratio(solo, jobs, job, plays[m.name], ref)
    where = ", ".join(f"{m} as {t}" for m, t in sorted(plays.items()))
    return TableSpeed(speeds, f"table:{Path(path).name}:{seed} ({where})")


def make_speed_truth(spec: str, types: Sequence[str], gpus: Sequence[GpuSpec]) -> SpeedTruth:
    """``alike``, ``spec[:SEED]`` or ``table:PATH[:SEED]`` (see the module doc)."""
    kind, _, rest = spec.strip().partition(":")
    if kind in ("", "alike"):
        if rest:
            raise ValueError(f"speed truth {spec!r}: alike takes no argument")
        return ALIKE
    if kind == "spec":
        try:
            seed = int(rest) if rest else 0
        except ValueError:
            raise ValueError(f"speed truth {spec!r}: write spec or spec:SEED with SEED a number") from None
        if not gpus:
            raise ValueError(f"speed truth {spec!r} needs the cluster's GPUs")
        return drawn_spec(types, gpus, seed)
    if kind == "table":
        path, sep, tail = rest.rpartition(":")
        if not sep or not tail.strip().lstrip("-").isdigit():
            path, tail = rest, ""
        if not path:
            raise ValueError(f"speed truth {spec!r}: write table:PATH[:SEED]")
        return solo_table(path, types, gpus, int(tail) if tail else 0)
    raise ValueError(f"speed truth {spec!r}: one of alike, spec[:SEED], table:PATH[:SEED]")


__all__ = [
    "ALIKE",
    "HIGH_SHARE",
    "LOW_SHARE",
    "AlikeSpeed",
    "SpecSpeed",
    "SpeedTruth",
    "TableSpeed",
    "drawn_spec",
    "make_speed_truth",
    "read_solo_table",
    "solo_table",
]
