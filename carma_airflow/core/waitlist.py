"""The waiting tries, indexed so a pass need not sort or walk thousands of them.

Two orders are kept as tries come and go (each insertion or removal a binary search and a list
move in C):

* all tries by ``(submitted_at, key)``: the oldest one (the queue's starvation candidate) and the
  next starvation bound still ahead, without a scan;
* in groups of one placement shape (:meth:`Placer.shape`) and one queue class
  (:meth:`QueueDiscipline.class_of`), each in the same order, which is the queue's order inside
  a class at every time: :meth:`Placer.place` merges the groups' heads and stops a shape at its
  first try that must wait, so a pass decides a few tries per shape, not every waiting one.

Pure data, no clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from carma_airflow.core.task import TaskRequest


def _by_submission(r: TaskRequest) -> tuple[float, str]:
    return (r.submitted_at, r.key)


FILTER_AT = 64  # removals at once from which :meth:`WaitList.remove_all` filters the lists


class WaitList:
    """Waiting requests by submission, and grouped by ``group_of`` (each group by submission)."""

    def __init__(self, group_of: Callable[[TaskRequest], Hashable]) -> None:
        self._group_of = group_of
        self._all: list[TaskRequest] = []
        self._groups: dict[Hashable, list[TaskRequest]] = {}
        self._where: dict[str, Hashable] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, request: TaskRequest) -> None:
        group = self._group_of(request)
        self._where[request.key] = group
        bisect.insort(self._all, request, key=_by_submission)
        bisect.insort(self._groups.setdefault(group, []), request, key=_by_submission)

    def remove(self, request: TaskRequest) -> None:
        group = self._where.pop(request.key)
        _drop(self._all, request)
        members = self._groups[group]
        _drop(members, request)
        if not members:
            del self._groups[group]

    def remove_all(self, requests: Sequence[TaskRequest]) -> None:
        """:meth:`remove` of each; many at once filter each list once instead (a removal is a
        binary search by a Python key, a thousand of them cost more than one walk)."""
        if len(requests) < FILTER_AT:
            for r in requests:
                self.remove(r)
            return
        gone = {r.key for r in requests}
        if len(gone) != len(requests):
            raise ValueError("WaitList.remove_all: a request is given twice")
        missing = [key for key in gone if key not in self._where]
        if missing:  # as remove, and before anything is taken out
            raise KeyError(missing[0])
        touched = {self._where.pop(key) for key in gone}
        self._all = [r for r in self._all if r.key not in gone]
        for group in touched:
            members = [r for r in self._groups[group] if r.key not in gone]
            if members:
                self._groups[group] = members
            else:
                del self._groups[group]

    def groups(self) -> list[list[TaskRequest]]:
        """The groups, each sorted by ``(submitted_at, key)`` (the lists themselves: read only)."""
        return list(self._groups.values())

    def oldest(self) -> TaskRequest | None:
        """The request with the smallest ``(submitted_at, key)``."""
        return self._all[0] if self._all else None

    def next_bound(self, bound_s: float, now: float) -> float | None:
        """The smallest ``submitted_at + bound_s`` after ``now``, if any."""
        waiting = self._all
        i = bisect.bisect_left(waiting, True, key=lambda r: r.submitted_at + bound_s > now)
        return waiting[i].submitted_at + bound_s if i < len(waiting) else None


T = TypeVar("T")


def spread(
    groups: Sequence[Sequence[TaskRequest]],
    stops: Sequence[tuple[int, int, T]],
    cut: tuple[object, ...] | None,
    order_key: Callable[[TaskRequest], tuple[object, ...]],
) -> dict[str, T]:
    """Per request key, what a group's stop says of it: ``stops`` holds (group, first member,
    value), and the value goes to that member and every later one of the group, up to ``cut``
    (members whose ``order_key`` is past it get none; None: no cut).  Each group is sorted by
    ``order_key`` (a group's order at every time, :meth:`WaitList.groups`)."""
    out: dict[str, T] = {}
    for g, first, value in stops:
        group = groups[g]
        end = len(group) if cut is None else bisect.bisect_right(group, cut, lo=first, key=order_key)
        out.update(dict.fromkeys([r.key for r in group[first:end]], value))
    return out


def _drop(members: list[TaskRequest], request: TaskRequest) -> None:
    i = bisect.bisect_left(members, _by_submission(request), key=_by_submission)
    if i >= len(members) or members[i].key != request.key:
        raise KeyError(request.key)
    del members[i]


__all__ = ["WaitList", "spread"]
