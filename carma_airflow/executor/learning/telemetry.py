"""GPU telemetry attributed to the tries that run (issue 13): what each try's own SM activity
was, and whom it shared its GPUs with.

Per process where the monitor offers it (NVML's per-process utilisation; the simulated GPUs'
ledger): a process belongs to the try whose launcher session it runs in (the launcher starts
each try with ``setsid``, so the session id is the try's pid).  Otherwise the GPU's SM activity
counts for a try only while it is the GPU's one tenant.  A try's own utilisation read while it
shared its GPUs reads low (its co-tenants slow it and take SM time from it; issue 41: 0.28 shared,
0.50 alone, the same workload), so it counts only for a try never seen alone, and is marked
shared (core/activity.py).  Each new monitor sample is counted once.
Each set of co-tenants is kept with their task types (their labels without a map index, as the
interference terms are kept), so that an ended try's observation names whom it shared with and
the pressure each type puts on others is learned (issue 23).

A try that reports its progress (taskrun/progress.py; ``progress``: the reader of a running try's
last report) is also timed stretch by stretch: between two reports read at consecutive samples
with the same co-tenants (none: alone), its work done over the seconds between them (the task's
own clock) is its speed there.  Once it was alone for :data:`MIN_STRETCH_S` its speed beside each
set of co-tenants seen as long gives one observation of interference, its speed alone over its
speed there (:class:`ProgressStretch`), and its run alone: its run less what its co-tenants cost
it between its first and last report (that span less its work there at its speed alone; its
start-up and what it did unreported stay as they ran): no solo run of its task needed first.  The simulator's tries do
the same (``SimConfig.progress_reports``; sim/learning.py ``_from_progress``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from carma_airflow.core.activity import ActivitySample
from carma_airflow.core.gpu import Tenant
from carma_airflow.core.interference import Segment
from carma_airflow.core.policies.predictive import task_type
from carma_airflow.executor.tries import Try
from carma_airflow.monitor.base import GpuSample
from carma_airflow.taskrun.procstat import session_of
from carma_airflow.taskrun.progress import ProgressReport

MIN_STRETCH_S = 10.0  # seconds a try must have run alone, and beside a set of co-tenants, for its speed there


@dataclass(slots=True)
class _Watch:
    process_sum: float = 0.0  # its own processes' SM utilisation while it was alone on its GPUs
    process_n: int = 0
    shared_sum: float = 0.0  # ... while it shared them (reads low: issue 41)
    shared_process_n: int = 0
    alone_sum: float = 0.0
    alone_n: int = 0
    shared_n: int = 0
    samples_n: int = 0
    # co-tenant try keys -> (samples, their activities, their task types, in the same order)
    co_tenants: dict[tuple[str, ...], tuple[int, tuple[float, ...], tuple[str, ...]]] = field(default_factory=dict)
    # progress reports: the first and last read (the last at its co-tenants' keys, () alone), and per set of
    # co-tenant keys the seconds and work between reports read with that set at both ends (their activities
    # and types are those of ``co_tenants``)
    first: ProgressReport | None = None
    last: tuple[ProgressReport, tuple[str, ...]] | None = None
    moves: dict[tuple[str, ...], tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProgressStretch:
    """A try's speed alone over its speed beside ``co_activities`` (of types ``co_types``), from its
    own progress reports: how much slower those co-tenants made it."""

    stretch: float
    co_activities: tuple[float, ...]
    co_types: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Seen:
    """What the telemetry said about one ended try."""

    activity: ActivitySample | None  # its own SM activity, if measured
    alone: bool  # no co-tenant in any sample (its run time is a solo run time)
    segments: tuple[Segment, ...]  # the shares of its samples per set of co-tenants (their activities, types)
    co_tasks: tuple[str, ...] = ()  # the task types it shared its GPUs with at some time, sorted
    # from its progress reports: its slowdown beside each set of co-tenants it ran with long enough,
    # and the seconds its co-tenants cost it between its first and last report (the span less its
    # work there at its speed alone; None: never alone long enough): its run less them is its run alone
    stretches: tuple[ProgressStretch, ...] = ()
    slowed_s: float | None = None
    reported: bool = False  # it reported its progress (taskrun/progress.py)


class Attribution:
    def __init__(
        self,
        session: Callable[[int], int | None] = session_of,
        progress: Callable[[Try], ProgressReport | None] | None = None,
    ) -> None:
        self._session = session
        self._progress = progress  # a running try's last progress report (None: not read)
        self._sessions: dict[int, int | None] = {}  # pid -> session id (a process keeps its session)
        self._watch: dict[str, _Watch] = {}
        self._last_at: dict[str, float] = {}  # GPU UUID -> the sample already counted

    def observe(
        self, samples: Mapping[str, GpuSample], running: Iterable[Try], tenants_on: Callable[[str], Sequence[Tenant]]
    ) -> None:
        fresh = {u: s for u, s in samples.items() if s.ok and self._last_at.get(u) != s.at}
        if not fresh:
            return
        for uuid, sample in fresh.items():
            self._last_at[uuid] = sample.at
        for attempt in running:
            pid = attempt.handle.pid if attempt.handle is not None else None
            gpus = [fresh[u] for u in attempt.gpu_uuids if u in fresh]
            if pid is None or not gpus:
                continue
            watch = self._watch.setdefault(attempt.rkey, _Watch())
            watch.samples_n += 1
            own = [p.sm_util for g in gpus for p in g.processes if p.sm_util is not None and self._in(p.pid, pid)]
            others = {t.key: t for g in gpus for t in tenants_on(g.uuid) if t.key != attempt.rkey}
            if own and others:  # its co-tenants slow it and take SM time from it: kept apart
                watch.shared_sum += sum(own) / len(own)
                watch.shared_process_n += 1
            elif own:
                watch.process_sum += sum(own) / len(own)
                watch.process_n += 1
            key = tuple(sorted(others))
            if self._progress is not None:
                self._moved(watch, self._progress(attempt), key)
            if not others:
                smact = [g.smact for g in gpus if g.smact is not None]
                if smact:
                    watch.alone_sum += sum(smact) / len(smact)
                    watch.alone_n += 1
                continue
            watch.shared_n += 1
            acts = tuple(t.activity.sm_activity if t.activity is not None else 0.5 for t in others.values())
            names = tuple(task_type(t.label) for t in others.values())
            count = watch.co_tenants.get(key, (0,))[0]
            watch.co_tenants[key] = (count + 1, acts, names)

    @staticmethod
    def _moved(watch: _Watch, now: ProgressReport | None, key: tuple[str, ...]) -> None:
        """Count the work between the last report read and ``now`` for co-tenants ``key``, where
        both were read with them (a stretch that changed co-tenants in between is not counted)."""
        if now is None:
            return
        last = watch.last
        watch.last = (now, key)
        if watch.first is None:
            watch.first = now
        if last is None or last[1] != key:
            return
        seconds, work = now.at - last[0].at, now.done - last[0].done
        if seconds <= 0 or work < 0:  # the same report again, or a restarted count
            return
        secs, done = watch.moves.get(key, (0.0, 0.0))
        watch.moves[key] = (secs + seconds, done + work)

    def _in(self, pid: int, session: int) -> bool:
        if pid not in self._sessions:
            if len(self._sessions) > 100_000:
                self._sessions.clear()
            self._sessions[pid] = self._session(pid)
        return self._sessions[pid] == session

    def so_far(self, rkey: str, min_samples: int) -> ActivitySample | None:
        """Try ``rkey``'s own SM activity while it still runs, once ``min_samples`` samples of its
        own processes while it was alone (or of its GPU while it was alone there), else of its own
        processes while it shared, say it; None until then.  Marked ``shared`` once it had co-tenants."""
        watch = self._watch.get(rkey)
        if watch is None:
            return None
        shared = watch.shared_n > 0
        if watch.process_n >= min_samples:
            return ActivitySample(watch.process_sum / watch.process_n, "process", shared)
        if watch.alone_n >= min_samples and not watch.process_n:
            return ActivitySample(watch.alone_sum / watch.alone_n, "gpu-alone", shared)
        if watch.shared_process_n >= min_samples and not watch.process_n and not watch.alone_n:
            return ActivitySample(watch.shared_sum / watch.shared_process_n, "process", True)
        return None

    def conclude(self, rkey: str) -> Seen:
        """What was seen of try ``rkey`` (which has ended); forgets it."""
        watch = self._watch.pop(rkey, None)
        if watch is None or watch.samples_n == 0:
            return Seen(None, False, ())
        activity = None
        shared = watch.shared_n > 0
        if watch.process_n:  # its own processes while it was alone: its solo activity
            activity = ActivitySample(watch.process_sum / watch.process_n, "process", shared)
        elif watch.alone_n:
            activity = ActivitySample(watch.alone_sum / watch.alone_n, "gpu-alone", shared)
        elif watch.shared_process_n:  # never alone: what it read beside others (low; counted where nothing better)
            activity = ActivitySample(watch.shared_sum / watch.shared_process_n, "process", True)
        alone_share = (watch.samples_n - watch.shared_n) / watch.samples_n
        segments = [Segment(alone_share, ())] if alone_share > 0 else []
        segments += [Segment(n / watch.samples_n, acts, names) for n, acts, names in watch.co_tenants.values()]
        co_tasks = tuple(sorted({name for _, _, names in watch.co_tenants.values() for name in names}))
        stretches, slowed_s = _from_progress(watch)
        reported = watch.last is not None
        return Seen(activity, watch.shared_n == 0, tuple(segments), co_tasks, stretches, slowed_s, reported)


def _from_progress(watch: _Watch) -> tuple[tuple[ProgressStretch, ...], float | None]:
    """An ended try's slowdowns beside its co-tenants and the seconds they cost it, from its progress reports."""
    alone = watch.moves.get(())
    if alone is None or alone[0] < MIN_STRETCH_S or alone[1] <= 0:
        return (), None
    rate = alone[1] / alone[0]  # work per second alone
    stretches = tuple(
        ProgressStretch(rate / (work / secs), *watch.co_tenants[key][1:])
        for key, (secs, work) in watch.moves.items()
        if key and secs >= MIN_STRETCH_S and work > 0
    )
    first, last = watch.first, watch.last
    assert first is not None and last is not None  # a move was counted between two reports
    span, work = last[0].at - first.at, last[0].done - first.done
    return stretches, max(0.0, span - work / rate)


__all__ = ["MIN_STRETCH_S", "Attribution", "ProgressStretch", "Seen", "session_of"]
