"""GPU memory estimators behind one interface.  Pure functions of what they are given.

An estimator turns :class:`TaskMemoryInfo` (what is known about a task) into a
:class:`~carma_airflow.core.task.MemoryNeed`.  Catalogue values of 40000 MiB or more mean
"the estimator gave up" (the workload's convention) and become ``whole_gpu``.

A declared value wins over history, until the task's history shows it outgrowing it: when each
of its last :data:`OUTGROWN_RUNS` successful runs peaked more than :data:`OUTGROWN_TOLERANCE`
above the declaration, the reservation follows the history (:class:`Declared` with a
:class:`History`), unless the author keeps the declaration (``memory_policy="declared"``,
``TaskMemoryInfo.keep_declared``).  Either way the estimate's source starts with
:data:`OUTGREW`, which the try's log, ``carma why`` and the UI show and flag.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from carma_airflow.core.errors import UnknownPolicyError
from carma_airflow.core.task import MemoryNeed

GAVE_UP_MIB = 40000  # the catalogue's sentinel for "could not estimate"


@dataclass(frozen=True, slots=True)
class TaskMemoryInfo:
    """What may be known about a task's memory.  Any field may be missing (None)."""

    declared_mib: int | None = None
    measured_peak_mib: int | None = None  # oracle: peak of a solo run
    horus_mib: int | None = None
    faketensor_mib: int | None = None
    gpumemnet_mib: int | None = None
    history_mib: tuple[int, ...] = ()  # peaks of earlier successful runs, oldest first
    history_of: str | None = None  # whose runs history_mib are when not the whole task's, e.g. "map index 2"
    keep_declared: bool = False  # the author keeps the declaration even where history outgrew it


class MemoryEstimator:
    """Base: ``estimate`` returns a need, or None when this estimator knows nothing."""

    name = "base"

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        raise NotImplementedError


def _value(mib: int | None, source: str) -> MemoryNeed | None:
    if mib is None:
        return None
    if mib >= GAVE_UP_MIB:
        return MemoryNeed(mib=mib, source=f"{source} (gave up: whole GPU)", whole_gpu=True)
    return MemoryNeed(mib=max(1, mib), source=source)


OUTGROWN_RUNS = 2  # the latest successful runs that must all have peaked above the declaration
OUTGROWN_TOLERANCE = 0.10  # ... by more than this share of it (a CUDA context, allocator jitter)
OUTGREW = "outgrew its declaration"  # how an estimate's source starts when history outgrew it
KEEP_HINT = "to keep the declaration instead, write memory_policy='declared'"  # advice: this estimate did not keep it


def outgrown_peaks(info: TaskMemoryInfo) -> tuple[int, ...]:
    """The latest peaks that show a task outgrew its declaration; empty when it did not (or
    nothing is declared, or it has no history)."""
    if info.declared_mib is None or not info.history_mib:
        return ()
    recent = info.history_mib[-OUTGROWN_RUNS:]
    limit = info.declared_mib * (1.0 + OUTGROWN_TOLERANCE)
    return tuple(recent) if all(peak > limit for peak in recent) else ()


def outgrew_declaration(source: str | None) -> bool:
    """Whether an estimate's source (as the store keeps it) says the task outgrew its declaration."""
    return bool(source) and str(source).startswith(OUTGREW)


class Declared(MemoryEstimator):
    """The author's value; with ``history``, the history's once the task has outgrown it."""

    name = "declared"

    def __init__(self, history: History | None = None) -> None:
        self.history = history

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        declared = info.declared_mib
        if declared is None:
            return None
        history = self.history
        grew = outgrown_peaks(info) if history is not None else ()
        learned = history.estimate(info) if history is not None and grew else None
        if history is None or learned is None:
            return MemoryNeed(declared, "declared")
        of = f" of {info.history_of}" if info.history_of else ""
        runs = f"its last {len(grew)} run{'s' if len(grew) != 1 else ''}{of} peaked at {', '.join(map(str, grew))} MiB"
        if info.keep_declared:
            return MemoryNeed(declared, f"{OUTGREW}, kept: declared {declared} MiB (memory_policy='declared'); {runs}")
        top = max(info.history_mib[-history.runs :])
        return MemoryNeed(
            learned.mib,
            f"{OUTGREW}: declared {declared} MiB; {runs}: reserving {learned.mib} MiB "
            f"({top} + {round(history.margin * 100)} %); {KEEP_HINT}",
        )


class Oracle(MemoryEstimator):
    name = "oracle"

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        # a measured peak is memory, never the estimators' "gave up" sentinel
        mib = info.measured_peak_mib
        return None if mib is None else MemoryNeed(max(1, mib), "oracle")


class Horus(MemoryEstimator):
    name = "horus"

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        return _value(info.horus_mib, "horus")


class FakeTensor(MemoryEstimator):
    name = "faketensor"

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        return _value(info.faketensor_mib, "faketensor")


class GpuMemNet(MemoryEstimator):
    name = "gpumemnet"

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        return _value(info.gpumemnet_mib, "gpumemnet")


class Floor(MemoryEstimator):
    """No estimate: demand a fixed amount of free memory (paper: 5120 MiB), no headroom."""

    name = "floor"

    def __init__(self, floor_mib: int = 5120) -> None:
        self.floor_mib = floor_mib

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        return MemoryNeed(self.floor_mib, "floor", add_headroom=False)


class History(MemoryEstimator):
    """Learns from earlier runs: the largest of the last ``runs`` peaks, plus a margin.

    Rounded up to ``round_mib``.  Training runs of one task on one data set vary little, so a
    small margin covers the allocator's jitter without wasting much.
    """

    name = "history"

    def __init__(self, runs: int = 5, margin: float = 0.10, round_mib: int = 256, cap_mib: int | None = None) -> None:
        self.runs = runs
        self.margin = margin
        self.round_mib = round_mib
        # what the largest GPU offers an idle try: the margin never lifts a peak that fit there past it
        self.cap_mib = cap_mib

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        """The largest recent peak plus the margin, rounded; at most ``cap_mib`` where the peak
        itself is within it.  Decision (issue 41): a task that ran on an L4 at 21 GiB asked 23.3
        GiB the next day, more than any L4 offers, and never ran again (6 tasks lost on day two of
        a held-out 4xL4 trace); the margin covers jitter, not a bigger GPU than there is."""
        if not info.history_mib:
            return None
        recent: Sequence[int] = info.history_mib[-self.runs :]
        top = max(recent)
        peak = round(top * (1.0 + self.margin), 6)  # 12800 * 1.1 is 14080.000000000002
        mib = math.ceil(peak / self.round_mib) * self.round_mib
        of = f" of {info.history_of}" if info.history_of else ""
        source = f"history{of} ({len(recent)} run(s), max {top} MiB)"
        if self.cap_mib is not None and top <= self.cap_mib < mib:
            return MemoryNeed(self.cap_mib, f"{source}, its margin cut to the largest GPU's {self.cap_mib} MiB")
        return MemoryNeed(mib, source)


class Chain(MemoryEstimator):
    """The first estimator that knows something wins; the last one should always know."""

    def __init__(self, *links: MemoryEstimator) -> None:
        if not links:
            raise ValueError("Chain needs at least one estimator")
        self.links = links
        self.name = "+".join(link.name for link in links)

    def estimate(self, info: TaskMemoryInfo) -> MemoryNeed | None:
        for link in self.links:
            need = link.estimate(info)
            if need is not None:
                return need
        return None


_SIMPLE: dict[str, Callable[[], MemoryEstimator]] = {
    "declared": Declared,
    "oracle": Oracle,
    "horus": Horus,
    "faketensor": FakeTensor,
    "gpumemnet": GpuMemNet,
    "floor": Floor,
    "history": History,
}
# The executor's default (``[carma] estimator = history``, options.py): a declared memory (until the
# task's runs outgrow it), else the task's learned peaks, else the floor.  Its ``history`` chain
# names GPUMemNet after the history, but the executor never has a GPUMemNet figure, so that link
# never answers there; a simulated catalogue has one, so the simulator's default is this chain,
# which decides what the executor's does with what the executor knows (issue 41; tests/sim/
# test_executor_defaults.py holds the two together).
EXECUTOR_ESTIMATOR = "history+floor"
DEFAULT_ESTIMATOR = EXECUTOR_ESTIMATOR  # ``carma simulate``'s and SimConfig's, which are the executor's


def estimator_names() -> list[str]:
    return list(_SIMPLE)


def make_estimator(name: str, floor_mib: int = 5120, largest_mib: int | None = None) -> MemoryEstimator:
    """Build an estimator by name (``largest_mib``: what the largest GPU offers an idle try, the
    most a learned estimate's margin may reach: :class:`History`).

    Every estimator is chained as ``declared -> NAME -> floor``: a memory the author declared
    wins (with ``history`` in the chain, until the task's runs outgrow it: module docstring),
    and a task the estimator knows nothing about gets the floor.  ``history``
    chains ``declared -> history -> gpumemnet -> floor``.  ``a+b`` chains explicitly.
    """
    wanted = name.strip().lower()
    parts = [p for p in wanted.split("+") if p]
    links: list[MemoryEstimator] = []
    for part in parts or [wanted]:
        factory = _SIMPLE.get(part)
        if factory is None:
            raise UnknownPolicyError(f"unknown estimator {name!r}; use one of {', '.join(_SIMPLE)} or a+b")
        if part == "floor":
            links.append(Floor(floor_mib))
        elif part == "history":
            links.append(History(cap_mib=largest_mib))
        else:
            links.append(factory())
    if len(parts) == 1 and parts[0] == "history":
        links.append(GpuMemNet())
    if not isinstance(links[0], Declared):
        history = next((link for link in links if isinstance(link, History)), None)
        links.insert(0, Declared(history))  # with history in the chain, past an outgrown declaration too
    if not isinstance(links[-1], Floor):
        links.append(Floor(floor_mib))
    chain = Chain(*links)
    chain.name = wanted
    return chain
