"""What the simulated GPUs do to their tenants: the truth, kept apart from what the placer learns.

``sharing`` (the default) is the sharing model's rule (:class:`~carma_airflow.core.sharing.SharingModel`):
one activity number per task sets how much it suffers and how much it hurts.  A model that fits
its own simulator proves little, so two truths of another form can be chosen
(``SimConfig.truth``, ``carma simulate --truth``):

* ``types[:SEED]``: per task type a *sensitivity* ``s`` and a *pressure* ``p``, drawn (seeded)
  log-normal around 1 with ``SPREAD`` (0.6 in log: about the spread the per-task terms find on
  measured pairs, bench/interference_eval.py); task ``i`` beside co-tenants ``j`` runs slower by
  ``max(1, D) * (1 + beta * s_i * sum_j p_j a_j)`` (``D``: the summed demand).
* ``pairs:PATH[:GPU[:SEED]]``: a measured pair table (``gavel_pairs.csv``'s form, or
  ``job,partner,solo,shared``) mapped onto the trace's task types: each task type is given one of
  the table's job types (seeded), and a tenant's slowdown beside co-tenants is the product of its
  measured pair slowdowns (``solo / shared``) beside each of them; a pair the table lacks
  slows by the table's median.

Activity ``a`` here is the true demand (the reported activity times ``SimConfig.activity_scale``).
Telemetry (what the monitor reports) stays the sharing model's in every truth.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from carma_airflow.core.sharing import ActivityProfile, SharingModel

SPREAD = 0.6  # log-normal spread of drawn sensitivities and pressures


class Truth(Protocol):
    @property
    def name(self) -> str: ...

    def slowdowns(self, profiles: Sequence[ActivityProfile], types: Sequence[str]) -> list[float]:
        """Slowdown of each tenant of one GPU (1.0 = solo speed), given the tenants' task types."""
        ...


@dataclass(frozen=True, slots=True)
class SharingTruth:
    """The sharing model's rule (task types play no part)."""

    model: SharingModel
    name: str = "sharing"

    def slowdowns(self, profiles: Sequence[ActivityProfile], types: Sequence[str]) -> list[float]:
        return self.model.slowdowns(profiles)


@dataclass(frozen=True, slots=True)
class TypeTermsTruth:
    """Per task type sensitivity and pressure (a type not listed: 1.0 for both)."""

    beta: float
    sensitivity: Mapping[str, float]
    pressure: Mapping[str, float]
    name: str = "types"

    def slowdowns(self, profiles: Sequence[ActivityProfile], types: Sequence[str]) -> list[float]:
        demand = sum(p.sm_activity for p in profiles)
        sat = max(1.0, demand)
        pushes = [self.pressure.get(t, 1.0) * p.sm_activity for p, t in zip(profiles, types, strict=True)]
        total = sum(pushes)
        return [
            sat * (1.0 + self.beta * self.sensitivity.get(t, 1.0) * (total - push))
            for t, push in zip(types, pushes, strict=True)
        ]


def drawn_types(beta: float, types: Sequence[str], seed: int, spread: float = SPREAD) -> TypeTermsTruth:
    """Sensitivities and pressures drawn log-normal (median 1) per task type, seeded."""
    sens: dict[str, float] = {}
    pres: dict[str, float] = {}
    for n in sorted(set(types)):  # one stream per type: a type draws the same in every trace
        rng = random.Random(f"types:{seed}:{n}")
        sens[n] = math.exp(rng.gauss(0.0, spread))
        pres[n] = math.exp(rng.gauss(0.0, spread))
    return TypeTermsTruth(beta, sens, pres, f"types:{seed}")


@dataclass(frozen=True, slots=True)
class PairTableTruth:
    """Measured pair slowdowns mapped onto task types."""

    slowdown_of: Mapping[tuple[str, str], float]  # (task type, co-tenant task type) -> slowdown
    fallback: float
    name: str = "pairs"

    def slowdowns(self, profiles: Sequence[ActivityProfile], types: Sequence[str]) -> list[float]:
        out = []
        for i, t in enumerate(types):
            s = 1.0
            for j, other in enumerate(types):
                if j != i:
                    s *= self.slowdown_of.get((t, other), self.fallback)
            out.append(s)
        return out


def pair_table(path: str | Path, types: Sequence[str], gpu: str | None = None, seed: int = 0) -> PairTableTruth:
    """A measured pair table (see the module doc) mapped onto ``types``, seeded."""
    import pandas as pd  # the simulator may use pandas; core may not

    df = pd.read_csv(path)
    if "gpu" in df.columns and gpu is not None:
        df = df[df["gpu"].astype(str).str.lower() == gpu.lower()]
    pairs: dict[tuple[str, str], list[float]] = {}
    if {"job_a", "job_b", "solo_a", "solo_b", "shared_a", "shared_b"} <= set(df.columns):
        for ja, jb, sa, sb, ha, hb in zip(
            df["job_a"], df["job_b"], df["solo_a"], df["solo_b"], df["shared_a"], df["shared_b"], strict=True
        ):
            pairs.setdefault((str(ja), str(jb)), []).append(float(sa) / float(ha))
            pairs.setdefault((str(jb), str(ja)), []).append(float(sb) / float(hb))
    elif {"job", "partner", "solo", "shared"} <= set(df.columns):
        for job, partner, solo, shared in zip(df["job"], df["partner"], df["solo"], df["shared"], strict=True):
            pairs.setdefault((str(job), str(partner)), []).append(float(solo) / float(shared))
    else:
        raise ValueError(f"{path}: need columns job,partner,solo,shared or job_a,job_b,solo_a,solo_b,shared_a,shared_b")
    if not pairs:
        raise ValueError(f"{path}: no pairs{'' if gpu is None else f' for GPU {gpu}'}")
    measured = {k: max(1.0, statistics.median(v)) for k, v in pairs.items()}
    jobs = sorted({j for j, _ in measured})
    names = sorted(set(types))
    given = {n: random.Random(f"pairs:{seed}:{n}").choice(jobs) for n in names}
    fallback = statistics.median(measured.values())
    table = {}
    for a in names:
        for b in names:
            s = measured.get((given[a], given[b]))
            if s is not None:
                table[(a, b)] = s
    return PairTableTruth(table, fallback, f"pairs:{Path(path).name}:{gpu or 'all'}:{seed}")


def make_truth(spec: str, model: SharingModel, types: Sequence[str]) -> Truth:
    """``sharing``, ``types[:SEED]`` or ``pairs:PATH[:GPU[:SEED]]`` (see the module doc)."""
    kind, _, rest = spec.strip().partition(":")
    if kind in ("", "sharing"):
        return SharingTruth(model)
    if kind == "types":
        try:
            seed = int(rest) if rest else 0
        except ValueError:
            raise ValueError(f"truth {spec!r}: write types or types:SEED with SEED a number") from None
        return drawn_types(model.beta, types, seed)
    if kind == "pairs":
        parts = rest.split(":")
        if not parts or not parts[0]:
            raise ValueError(f"truth {spec!r}: write pairs:PATH[:GPU[:SEED]]")
        gpu = parts[1] if len(parts) > 1 and parts[1] else None
        try:
            seed = int(parts[2]) if len(parts) > 2 else 0
        except ValueError:
            raise ValueError(f"truth {spec!r}: SEED must be a number") from None
        return pair_table(parts[0], types, gpu, seed)
    raise ValueError(f"truth {spec!r}: one of sharing, types[:SEED], pairs:PATH[:GPU[:SEED]]")


__all__ = [
    "SPREAD",
    "PairTableTruth",
    "SharingTruth",
    "Truth",
    "TypeTermsTruth",
    "drawn_types",
    "make_truth",
    "pair_table",
]
