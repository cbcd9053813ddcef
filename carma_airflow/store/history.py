"""What the estimators learn from: the memory peaks and the solo SM activity of ended tries
(with the task types each try shared its GPUs with, and its run time where it ran alone)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlalchemy import ColumnElement, select

from carma_airflow.store.engine import Moment, StoreBase, check_limit, utc
from carma_airflow.store.errors import RecordError
from carma_airflow.store.records import ActivityRecord
from carma_airflow.store.schema import ACTIVITY_SOURCE_VALUES, ActivityHistoryRow, MemoryHistoryRow


class HistoryStore(StoreBase):
    """The store's calls on learned history (part of :class:`~carma_airflow.store.store.Store`)."""

    # -- memory history -----------------------------------------------------------------

    def add_peak(
        self,
        dag_id: str,
        task_id: str,
        peak_mib: int,
        at: Moment,
        run_id: str | None = None,
        map_index: int | None = None,
    ) -> None:
        """Remember the memory peak of a successful run of a task (``map_index``: of which instance)."""
        if peak_mib < 0:
            raise RecordError(f"peak of {dag_id}.{task_id} must not be negative, got {peak_mib} MiB")
        row = MemoryHistoryRow(
            dag_id=dag_id, task_id=task_id, peak_mib=peak_mib, at=utc(at), run_id=run_id, map_index=map_index
        )
        with self._session(write=True) as session:
            session.add(row)

    def peaks(self, dag_id: str, task_id: str, limit: int = 5, *, map_index: int | None = None) -> list[int]:
        """The latest ``limit`` peaks of a task, oldest first (``TaskMemoryInfo.history_mib``).

        ``map_index`` None: of every run of the task; an int: only of runs of that map index.
        """
        check_limit(limit)
        stmt = select(MemoryHistoryRow.peak_mib).where(
            MemoryHistoryRow.dag_id == dag_id, MemoryHistoryRow.task_id == task_id
        )
        if map_index is not None:
            stmt = stmt.where(MemoryHistoryRow.map_index == map_index)
        stmt = stmt.order_by(MemoryHistoryRow.at.desc(), MemoryHistoryRow.id.desc()).limit(limit)
        with self._session() as session:
            return list(reversed(session.scalars(stmt).all()))

    def recent_peaks(self, limit: int = 100_000) -> list[tuple[str, str, int | None, int]]:
        """The newest ``limit`` learned peaks of every task, oldest first: (dag_id, task_id,
        map_index, peak_mib).  Read once when an executor starts (executor/learning/learned.py)."""
        check_limit(limit)
        stmt = (
            select(
                MemoryHistoryRow.dag_id, MemoryHistoryRow.task_id, MemoryHistoryRow.map_index, MemoryHistoryRow.peak_mib
            )
            .order_by(MemoryHistoryRow.at.desc(), MemoryHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(r[0], r[1], r[2], int(r[3])) for r in session.execute(stmt)]
        return list(reversed(rows))

    # -- activity history (issue 13: learned SM activity) ---------------------------------

    def add_activity(
        self,
        dag_id: str,
        task_id: str,
        sm_activity: float,
        source: str,
        at: Moment,
        run_id: str | None = None,
        map_index: int | None = None,
        *,
        co_tasks: Sequence[str] | None = None,
        solo_s: float | None = None,
        gpu_model: str | None = None,
        shared_s: float | None = None,
        shared_alone_s: float | None = None,
    ) -> None:
        """Remember the solo SM activity (0..1) of one ended try of a task, and how it was measured.

        ``source``: ``"process"`` (per-process SM utilisation), ``"gpu-alone"`` (the GPU's SM
        activity while the try was its only tenant) or ``"hint"`` (the author's declared value).
        ``co_tasks``: the task types the try shared its GPUs with (empty: alone throughout; None:
        not known).  ``solo_s``: how long it ran, where it ran alone throughout (None: it shared);
        ``gpu_model``: the GPU model it ran on (kept with a solo or shared run time only).
        ``shared_s``: how long a first try ran where it shared its GPUs all along (an upper bound of
        the task's run alone; not with ``solo_s``); ``shared_alone_s``: the task's run alone as
        estimated from it (with ``shared_s`` only, at most that).
        """
        if source not in ACTIVITY_SOURCE_VALUES:
            raise RecordError(
                f"unknown activity source {source!r} for {dag_id}.{task_id}; use one of: "
                f"{', '.join(ACTIVITY_SOURCE_VALUES)}"
            )
        if isinstance(sm_activity, bool) or not isinstance(sm_activity, (int, float)) or not 0.0 <= sm_activity <= 1.0:
            raise RecordError(
                f"SM activity of {dag_id}.{task_id} must be a share of SM time between 0 and 1, got {sm_activity!r} "
                "(divide a percentage by 100)"
            )
        names = _co_tasks(dag_id, task_id, co_tasks)
        if solo_s is not None and not _seconds(solo_s):
            raise RecordError(f"solo run time of {dag_id}.{task_id} must be positive seconds, got {solo_s!r}")
        if shared_s is not None and not _seconds(shared_s):
            raise RecordError(f"shared run time of {dag_id}.{task_id} must be positive seconds, got {shared_s!r}")
        if shared_alone_s is not None and (
            shared_s is None or not _seconds(shared_alone_s) or shared_alone_s > shared_s
        ):
            raise RecordError(
                f"estimated run alone of {dag_id}.{task_id} must be positive seconds, at most its shared run time "
                f"{shared_s!r}, got {shared_alone_s!r}"
            )
        if shared_s is not None and solo_s is not None:
            raise RecordError(f"a try of {dag_id}.{task_id} ran alone or shared, not both: give solo_s or shared_s")
        timed = solo_s is not None or shared_s is not None
        row = ActivityHistoryRow(
            dag_id=dag_id,
            task_id=task_id,
            sm_activity=float(sm_activity),
            source=source,
            at=utc(at),
            run_id=run_id,
            map_index=map_index,
            co_tasks=names,
            solo_s=None if solo_s is None else float(solo_s),
            gpu_model=None if not timed or not gpu_model else str(gpu_model)[:64],
            shared_s=None if shared_s is None else float(shared_s),
            shared_alone_s=None if shared_alone_s is None else float(shared_alone_s),
        )
        with self._session(write=True) as session:
            session.add(row)

    def activities(self, dag_id: str, task_id: str, limit: int = 10) -> list[tuple[float, str]]:
        """The latest ``limit`` activities of a task, oldest first: (sm_activity, source)."""
        check_limit(limit)
        stmt = (
            select(ActivityHistoryRow.sm_activity, ActivityHistoryRow.source)
            .where(ActivityHistoryRow.dag_id == dag_id, ActivityHistoryRow.task_id == task_id)
            .order_by(ActivityHistoryRow.at.desc(), ActivityHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(float(r[0]), str(r[1])) for r in session.execute(stmt)]
        return list(reversed(rows))

    def recent_activities(self, limit: int = 100_000) -> list[tuple[str, str, float, str]]:
        """The newest ``limit`` learned activities of every task, oldest first: (dag_id, task_id,
        sm_activity, source).  Read once when an executor starts."""
        check_limit(limit)
        stmt = (
            select(
                ActivityHistoryRow.dag_id,
                ActivityHistoryRow.task_id,
                ActivityHistoryRow.sm_activity,
                ActivityHistoryRow.source,
            )
            .order_by(ActivityHistoryRow.at.desc(), ActivityHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(str(r[0]), str(r[1]), float(r[2]), str(r[3])) for r in session.execute(stmt)]
        return list(reversed(rows))

    def recent_activity_samples(self, limit: int = 100_000) -> list[tuple[str, str, float, str, bool]]:
        """As :meth:`recent_activities`, each with whether its try shared its GPUs (its
        ``co_tasks`` not empty; rows before revision 0007 and hints: False): a task's activity
        learns from its shared tries only where it has no solo one (core/activity.py)."""
        check_limit(limit)
        row = ActivityHistoryRow
        stmt = (
            select(row.dag_id, row.task_id, row.sm_activity, row.source, row.co_tasks)
            .order_by(row.at.desc(), row.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(str(d), str(t), float(v), str(s), bool(c)) for d, t, v, s, c in session.execute(stmt)]
        return list(reversed(rows))

    def recent_solo_runs(
        self, limit: int = 100_000, *, task: tuple[str, str] | None = None
    ) -> list[tuple[str, str, float]]:
        """The newest ``limit`` solo run times of every task (``task``: of that (dag_id, task_id)
        only), oldest first: (dag_id, task_id, seconds), from the learned tries that ran alone.
        Read once when an executor starts, and per task by ``carma why``."""
        check_limit(limit)
        row = ActivityHistoryRow
        stmt = (
            select(row.dag_id, row.task_id, row.solo_s)
            .where(row.solo_s.is_not(None), *_of_task(task))
            .order_by(row.at.desc(), row.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(str(d), str(t), float(s)) for d, t, s in session.execute(stmt) if s is not None]
        return list(reversed(rows))

    def recent_shared_runs(
        self, limit: int = 100_000, *, task: tuple[str, str] | None = None
    ) -> list[tuple[str, str, str | None, float, float | None]]:
        """The newest ``limit`` run times of first tries that shared their GPUs all along (``task``:
        of that (dag_id, task_id) only), oldest first: (dag_id, task_id, GPU model or None, seconds,
        run alone estimated or None), each an upper bound of its task's run alone.  Read once when
        an executor starts, and per task by ``carma why``."""
        check_limit(limit)
        row = ActivityHistoryRow
        stmt = (
            select(row.dag_id, row.task_id, row.gpu_model, row.shared_s, row.shared_alone_s)
            .where(row.shared_s.is_not(None), *_of_task(task))
            .order_by(row.at.desc(), row.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            got = session.execute(stmt)
            rows = [
                (str(d), str(t), str(m) if m else None, float(s), None if e is None else float(e))
                for d, t, m, s, e in got
                if s is not None
            ]
        return list(reversed(rows))

    def recent_solo_runs_by_model(self, limit: int = 100_000) -> list[tuple[str, str, str, float]]:
        """The newest ``limit`` solo run times measured on a known GPU model, oldest first: (dag_id,
        task_id, GPU model, seconds).  Read once when an executor starts, and by ``carma model``."""
        check_limit(limit)
        row = ActivityHistoryRow
        stmt = (
            select(row.dag_id, row.task_id, row.gpu_model, row.solo_s)
            .where(row.solo_s.is_not(None), row.gpu_model.is_not(None))
            .order_by(row.at.desc(), row.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(str(d), str(t), str(m), float(s)) for d, t, m, s in session.execute(stmt) if s is not None and m]
        return list(reversed(rows))

    def activity_records(self, dag_id: str, task_id: str, limit: int = 10) -> list[ActivityRecord]:
        """The latest ``limit`` activities of a task as records, oldest first, with the task types
        each try shared its GPUs with (None for rows written before revision 0007)."""
        check_limit(limit)
        stmt = (
            select(ActivityHistoryRow)
            .where(ActivityHistoryRow.dag_id == dag_id, ActivityHistoryRow.task_id == task_id)
            .order_by(ActivityHistoryRow.at.desc(), ActivityHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [
                ActivityRecord(
                    r.dag_id,
                    r.task_id,
                    float(r.sm_activity),
                    r.source,
                    r.at,
                    r.run_id,
                    r.map_index,
                    None if r.co_tasks is None else tuple(str(n) for n in r.co_tasks),
                )
                for r in session.scalars(stmt)
            ]
        return list(reversed(rows))


def _co_tasks(dag_id: str, task_id: str, co_tasks: Sequence[str] | None) -> list[str] | None:
    """The co-tenants' task types as stored: distinct, sorted; None stays None (not recorded)."""
    if co_tasks is None:
        return None
    if isinstance(co_tasks, str) or not all(isinstance(n, str) and n for n in co_tasks):
        raise RecordError(
            f"co-tenant task types of {dag_id}.{task_id} must be a list of non-empty names "
            f"(dag_id.task_id), got {co_tasks!r}"
        )
    return sorted(set(co_tasks))


def _seconds(value: object) -> bool:
    """Whether ``value`` is a positive, finite number of seconds (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0.0 < value < math.inf


def _of_task(task: tuple[str, str] | None) -> tuple[ColumnElement[bool], ...]:
    """The conditions that keep one task's activity rows (none: every task's)."""
    if task is None:
        return ()
    return (ActivityHistoryRow.dag_id == task[0], ActivityHistoryRow.task_id == task[1])
