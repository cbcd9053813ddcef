"""The drain order: a pricing policy's GPUs with tenants by the earliest they can drain.

An entry is (the absolute time the GPU drains by at the earliest, its place in the view, its
facts, None where that time is the policy's bound, else the time its loose bound was taken at).  The bound
(:meth:`~carma_airflow.core.policies.completion_time.CompletionTime.bound`) is a GPU's longest
work left at its tenants' predicted speeds; where those speeds are not at hand it would predict
every GPU's tenants only to sort them: a new deployment's first pass, and the first after a model
hand-over, paid that for a thousand GPUs, while a drain walk plays forward only the few whose
bound beats the soonest drain it found.

So an entry may carry a looser bound that predicts nothing (``quick_bound``: the work left as if
every tenant had run at solo speed since it started, no faster being predicted).  A walk settles
the loose entry of each GPU it could use as it comes to it (:func:`settle`): the entry gets its
bound and moves to its place, which is no earlier (the loose bound is at most the bound, and
places are unique), and the walk looks at the same index again.  The bound it gets is the one the
entry's time would have given (the order is kept from pass to pass).  A GPU the walk cannot use
is passed over as it is, and a walk stops at the first entry, loose or not, whose bound does not
beat the soonest drain found (no later one's bound is lower).  So every walk meets the GPUs it can
use in the order, and stops after the same ones, as with every bound worked out at once; only
the GPUs no walk could use or came to keep their loose bounds.
"""

from __future__ import annotations

import bisect
from operator import itemgetter
from typing import TYPE_CHECKING

from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.gpu import GpuHealth

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime

# (drains by at the earliest, place, facts, None or for a loose bound the time it was taken at)
Drain = tuple[float, int, GpuFacts, float | None]

_KEY = itemgetter(0, 1)


def entry(f: GpuFacts, ordinal: dict[str, int], chooser: CompletionTime) -> Drain | None:
    """A GPU's entry (None: no tenants, or quarantined), its bound loose where the exact one
    would predict speeds not at hand."""
    if (f.tenants or f.joined) and f.state.health is not GpuHealth.QUARANTINED:
        at, exact = chooser.quick_bound(f)
        return (chooser.now + at, ordinal[f.uuid], f, None if exact else chooser.now)
    return None


def settle(order: list[Drain], where: dict[str, Drain], k: int, chooser: CompletionTime) -> None:
    """Bound the loose entry at ``k`` as its time would have bounded it and move it to its place,
    no earlier (``where`` follows): a walk then looks at ``k`` again."""
    _, place, f, made = order[k]
    assert made is not None, "settle a loose entry"
    exact = (made + chooser.settled_bound(f, made), place, f, None)
    del order[k]
    bisect.insort(order, exact, lo=k, key=_KEY)
    where[f.uuid] = exact


def place(
    order: list[Drain], where: dict[str, Drain], f: GpuFacts, ordinal: dict[str, int], chooser: CompletionTime
) -> None:
    """Put a GPU's (new) facts in a drain order: out with its old entry, in by :func:`entry`."""
    if (old := where.pop(f.uuid, None)) is not None:
        drop(order, old)
    if (new := entry(f, ordinal, chooser)) is not None:
        where[f.uuid] = new
        bisect.insort(order, new, key=_KEY)


def drop(order: list[Drain], gone: Drain) -> None:
    """Take an entry out of a drain order (sorted by bound and place), if it is there."""
    i = bisect.bisect_left(order, (gone[0], gone[1]), key=_KEY)
    if i < len(order) and order[i][2] is gone[2]:
        del order[i]


__all__ = ["Drain", "drop", "entry", "place", "settle"]
