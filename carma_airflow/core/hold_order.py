"""The GPUs a starving request may be held on, kept in order from pass to pass.

A request past its starvation bound that must wait has the GPUs closest to fitting it held back
from everyone else (:meth:`carma_airflow.core.placer.Placer.place`).  Which GPUs: per host, the
matching GPUs in (fewest tenants, most usable memory, index) order.  On a deep queue that is
asked on most passes, over every GPU, so :class:`HoldOrder` keeps the order and moves only the
GPUs whose facts changed.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import compress
from operator import is_not

from carma_airflow.core.facts import model_matches
from carma_airflow.core.gpu import GpuHealth
from carma_airflow.core.policies.base import GpuFacts

_Held = tuple[int, int, int, int]  # a GPU's place in the hold order: (tenants, -usable MiB, index, ordinal)


class HoldOrder:
    """Per host, the GPUs a starving request of one shape (GPU count and model) may be held
    on, in (fewest tenants, most usable memory, index) order, kept up to date from pass to pass:
    :meth:`~carma_airflow.core.placer.Placer`'s choice without sorting every GPU on every pass.

    A host's first ``n`` are what sorting its matching GPUs gives (ties on the index broken by the
    GPU's place in the view, which orders a host's GPUs as their place on the host does); hosts
    are compared in the order their first matching GPU comes in the view."""

    def __init__(self, shape: tuple[int, str | None], facts: Sequence[GpuFacts]) -> None:
        self.shape = shape
        self.facts = list(facts)
        self.hosts: dict[str, list[_Held]] = {}  # in the order of their first matching GPU
        for ordinal, f in enumerate(facts):
            if self._matches(f):
                self.hosts.setdefault(f.state.host, []).append(_held(f, ordinal))
        for entries in self.hosts.values():
            entries.sort()

    def _matches(self, f: GpuFacts) -> bool:
        return f.state.health is not GpuHealth.QUARANTINED and model_matches(f.state.spec.name, self.shape[1])

    def update(self, facts: Sequence[GpuFacts]) -> bool:
        """Bring the order to ``facts``; False where it must be built afresh (other GPUs, or a GPU
        joins or leaves the matching ones or its host: the hosts' order may move)."""
        kept = self.facts
        if len(facts) != len(kept):
            return False
        changed = list(compress(range(len(facts)), map(is_not, facts, kept)))
        for i in changed:
            old, new = kept[i], facts[i]
            if old.state.uuid != new.state.uuid or old.state.host != new.state.host:
                return False
            matched = self._matches(old)
            if matched != self._matches(new):
                return False
            if matched:
                entries = self.hosts[new.state.host]
                del entries[bisect.bisect_left(entries, _held(old, i))]
                bisect.insort(entries, _held(new, i))
        self.facts = list(facts)
        return True

    def choose(self, n: int) -> frozenset[str]:
        """The ``n`` GPUs of the host whose first ``n`` have the most usable memory, the fewest
        tenants counted first (the first such host)."""
        best: list[GpuFacts] = []
        best_score = -1.0e18
        facts = self.facts
        for entries in self.hosts.values():
            if len(entries) < n:
                continue
            top = [facts[e[3]] for e in entries[:n]]
            score = float(sum(f.usable_free_mib for f in top)) - 1e9 * sum(f.tenants for f in top)
            if score > best_score:
                best, best_score = top, score
        return frozenset(f.uuid for f in best)


def _held(f: GpuFacts, ordinal: int) -> _Held:
    return (f.tenants, -f.usable_free_mib, f.state.index, ordinal)


__all__ = ["HoldOrder"]
