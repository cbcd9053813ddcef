"""The options the completion-time policy prices, and what it says of them.

An :class:`Option` is one thing a waiting try could do (share a GPU set, or wait for one to
drain) with its predicted cost in seconds of summed completion time (or in runs, before any run
time is known); a refused one carries the gain in summed speed it fell short with.  A
:class:`Choice` is every option priced for one try and the one taken; its texts are what the
placer's reasons, ``carma why`` and the UI show for each GPU
(:mod:`carma_airflow.core.policies.completion_time` prices them).
"""

from __future__ import annotations

from dataclasses import dataclass

from carma_airflow.core.policies.base import GpuFacts


def _dur(seconds: float, timed: bool) -> str:
    if not timed:
        return f"{seconds:.2f} runs"
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


@dataclass(frozen=True, slots=True)
class Option:
    """One priced option: GPUs (empty: wait) and its predicted cost."""

    gpus: tuple[GpuFacts, ...]
    cost: float  # newcomer's completion from now + the tenants' summed delay + the queue's (seconds, or runs)
    done_in: float  # the newcomer's predicted completion from now
    delay: float  # the tenants' summed delay
    slowdown: float  # the newcomer's predicted slowdown (1.0 waiting: it then runs alone)
    drained: GpuFacts | None = None  # waiting: the GPU predicted to drain first
    queue: float = 0.0  # the waiting tries' summed delay: GPU time taken x their share per GPU
    taken: float = 0.0  # the GPU-seconds the option takes from the queue (the queue's share over its weight)
    # refused: the least gain in summed speed on its GPUs, under the floor it was held to
    short: tuple[float, float] | None = None
    # what its predicted cost was multiplied by: how this deployment's tries that chose its kind of
    # option completed against their predictions (core/track_record.py)
    factor: float = 1.0

    @property
    def waits(self) -> bool:
        return not self.gpus

    @property
    def refused(self) -> bool:
        return self.short is not None

    def text(self, timed: bool) -> str:
        if self.waits:
            where = "" if self.drained is None else f" for GPU {self.drained.index}"
            return (
                f"waiting{where}: drains in {_dur(self.done_in - self.done_in / self.slowdown, timed)}"
                f" then alone{self._record('waits')}{self._queue(timed)}; cost {_dur(self.cost, timed)}"
            )
        if self.short is not None:
            gain, floor = self.short
            return (
                f"predicted {self.slowdown:.2f}x slower; adds {gain:+.2f} to the GPU's summed speed"
                f" (solo = 1.0 each), under the {floor:.2f} a collocation must add: refused"
            )
        return (
            f"predicted {self.slowdown:.2f}x slower, done in {_dur(self.done_in, timed)}; "
            f"co-tenants {'+' if self.delay >= 0 else '-'}{_dur(abs(self.delay), timed)}{self._record('shares')}"
            f"{self._queue(timed)}; cost {_dur(self.cost, timed)}"
        )

    def _record(self, kind: str) -> str:
        """The track record's factor where it moved the cost (core/track_record.py)."""
        if self.factor == 1.0:
            return ""
        how = "longer" if self.factor > 1.0 else "shorter"
        return f"; x{self.factor:.2f}: {kind} here took {how} than predicted"

    def _queue(self, timed: bool) -> str:
        return f"; queue +{_dur(self.queue, timed)}" if self.queue > 0 else ""


@dataclass(frozen=True, slots=True)
class Choice:
    """What :meth:`CompletionTime.choose` decided: the best option and every one it priced."""

    best: Option | None  # None: nothing to choose from
    options: tuple[Option, ...]
    timed: bool

    def note(self, f: GpuFacts) -> str | None:
        """The priced text of a GPU's option (for its reason), with what won."""
        for o in self.options:
            if o is not self.best and any(g is f for g in o.gpus):
                best = "" if self.best is None else f" (chose {self.best_text()})"
                return o.text(self.timed) + best
        return None

    def best_text(self) -> str:
        assert self.best is not None
        if self.best.waits:
            return f"waiting at {_dur(self.best.cost, self.timed)}"
        where = ", ".join(f"GPU {f.index}" for f in self.best.gpus)
        return f"{where} at {_dur(self.best.cost, self.timed)}"

    def wait_option(self) -> Option | None:
        return next((o for o in self.options if o.waits), None)


__all__ = ["Choice", "Option"]
