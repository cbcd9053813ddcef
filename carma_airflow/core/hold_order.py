"""The GPUs a starving request may be held on, kept in order from pass to pass.

A request past its starvation bound that must wait has the GPUs closest to fitting it held back
from everyone else (:class:`Holds`, a placer's).  Which GPUs: per host, the matching GPUs (not
quarantined, with the memory in all to hold the request, passing its per-try filters) in (fewest
tenants, most usable memory, index) order.  On a deep queue that is asked on most passes, over
every GPU, so :class:`HoldOrder` keeps the order and moves only the GPUs whose facts changed.

Once chosen for a try, the hold stays on the same GPUs while they still match: held GPUs take
nobody new, so they only drain.  Decision (issue 44): chosen afresh each pass, the hold followed
whichever GPU's tenants happened to finish first; on 2xH100-80GB + 6xL4 it moved from both H100s
to an H100 and an L4 that could never hold the 2-GPU try, the released H100 took new tenants, and
the try and the tries behind it waited most of the day (mean JCT 1.33x most-free-memory's).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from itertools import compress
from operator import is_not

from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, could_ever
from carma_airflow.core.gpu import GpuHealth
from carma_airflow.core.task import TaskRequest

_Held = tuple[int, int, int, int]  # a GPU's place in the hold order: (tenants, -usable MiB, index, ordinal)


class HoldOrder:
    """Per host, the GPUs a starving request of one shape (GPU count and what its per-try filters read) may be held
    on, in (fewest tenants, most usable memory, index) order, kept up to date from pass to pass:
    :meth:`~carma_airflow.core.placer.Placer`'s choice without sorting every GPU on every pass.

    A host's first ``n`` are what sorting its matching GPUs gives (ties on the index broken by the
    GPU's place in the view, which orders a host's GPUs as their place on the host does); hosts
    are compared in the order their first matching GPU comes in the view."""

    def __init__(
        self,
        shape: tuple[Hashable, ...],
        facts: Sequence[GpuFacts],
        request: TaskRequest | None = None,
        asked: Sequence[Filter] = (),
        least_mib: int = 0,
    ) -> None:
        self.shape = shape
        self.request = request
        self.asked = tuple(asked)  # the policy's per-try filters the request needs: "matching" GPUs pass them
        self.least_mib = least_mib  # the memory a matching GPU has in all (a smaller one never holds the request)
        self.facts = list(facts)
        self.hosts: dict[str, list[_Held]] = {}  # in the order of their first matching GPU
        for ordinal, f in enumerate(facts):
            if self.matches(f):
                self.hosts.setdefault(f.state.host, []).append(_held(f, ordinal))
        for entries in self.hosts.values():
            entries.sort()

    def matches(self, f: GpuFacts) -> bool:
        return _could_hold(f, self.request, self.asked, self.least_mib)

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
            matched = self.matches(old)
            if matched != self.matches(new):
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


class Holds:
    """A placer's starvation holds: the GPUs to keep free of new tenants so a starving request is
    guaranteed to start.  The N matching GPUs on one host with the fewest tenants and most usable
    memory: nothing new lands on them, so their free memory only grows as tenants finish, and the
    choice stays put from pass to pass.  Kept while the facts are the same objects (a pass whose
    GPUs did not change reuses the last pass's facts)."""

    def __init__(self) -> None:
        # the last hold: (request shape, the facts it was chosen from, their ids, the GPUs)
        self._held: tuple[tuple[Hashable, ...], list[GpuFacts], list[int], frozenset[str]] | None = None
        self._order: HoldOrder | None = None  # the GPUs in hold order, kept from pass to pass
        self._kept: tuple[str, tuple[Hashable, ...], frozenset[str]] | None = None  # (try, shape, GPUs) held last

    def choose(
        self, request: TaskRequest, facts: Sequence[GpuFacts], asked: Sequence[Filter] = (), least_mib: int = 0
    ) -> frozenset[str]:
        """``asked``: the policy's per-try filters ``request`` needs (a GPU they say could never
        take it is not held for it); ``least_mib``: the memory in all a GPU needs to ever hold it
        (its estimate and the reserve, where the policy checks memory; a smaller GPU is not held
        for it, however idle: on a fleet of several sizes, holding one would keep the GPU it
        needs taking new tenants)."""
        shape = (request.gpus, least_mib, *(flt.request_key(request) for flt in asked))
        ids = list(map(id, facts))
        held = self._held
        if held is not None and held[0] == shape and held[2] == ids:
            return held[3]
        kept = self._kept
        if kept is not None and kept[0] == request.key and kept[1] == shape:
            # the same try, held already: its GPUs stay held while they still could take it
            # (nothing new lands on them, so they only drain; re-choosing would let a GPU whose
            # tenants happened to finish take the hold, and the released ones take new tenants)
            on = [f for f in facts if f.uuid in kept[2]]
            still = all(_could_hold(f, request, asked, least_mib) for f in on)
            if len(on) == len(kept[2]) and len({f.state.host for f in on}) == 1 and still:
                self._held = (shape, list(facts), ids, kept[2])
                return kept[2]
        # asked on most passes of a deep queue, over every GPU: the hold order is kept from pass to
        # pass and only the GPUs whose facts are other objects are placed in it again
        order = self._order
        if order is None or order.shape != shape or not order.update(facts):
            order = self._order = HoldOrder(shape, facts, request, asked, least_mib)
        out = order.choose(request.gpus)
        self._held = (shape, list(facts), ids, out)  # the facts kept alive: their ids stay theirs
        self._kept = (request.key, shape, out)
        return out


def _could_hold(f: GpuFacts, request: TaskRequest | None, asked: Sequence[Filter], least_mib: int) -> bool:
    """Whether ``f`` may be held for ``request``: not quarantined, with ``least_mib`` in all, and
    passing the per-try filters ``asked`` once drained."""
    return (
        f.state.health is not GpuHealth.QUARANTINED
        and f.state.spec.memory_mib >= least_mib
        and (not asked or request is None or could_ever(asked, f.state, request))
    )


def _held(f: GpuFacts, ordinal: int) -> _Held:
    return (f.tenants, -f.usable_free_mib, f.state.index, ordinal)


__all__ = ["HoldOrder", "Holds"]
