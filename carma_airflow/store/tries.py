"""Task tries: each try's placement and how it ended, and the out-of-memory events of tries."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, select, update

from carma_airflow.store.engine import Moment, StoreBase, check_limit, utc
from carma_airflow.store.errors import RecordError
from carma_airflow.store.records import ACTIVE_OUTCOMES, OomRecord, PlacementRecord, TryOutcome
from carma_airflow.store.schema import OomEventRow, PlacementRow, ReservationRow


def _placement_record(row: PlacementRow) -> PlacementRecord:
    return PlacementRecord(
        key=row.key,
        dag_id=row.dag_id,
        task_id=row.task_id,
        run_id=row.run_id,
        map_index=row.map_index,
        try_number=row.try_number,
        label=row.label,
        decided_at=row.decided_at,
        outcome=TryOutcome(row.outcome),
        gpu_uuids=tuple(row.gpu_uuids),
        host=row.host,
        estimate_mib=row.estimate_mib,
        estimate_source=row.estimate_source,
        peak_mib=row.peak_mib,
        summary=row.summary,
        reasons=tuple(row.reasons),
        policy=row.policy,
        started_at=row.started_at,
        ended_at=row.ended_at,
        pid=row.pid,
        pid_start=row.pid_start,
        ti_id=row.ti_id,
        id=row.id,
        owner=row.owner,
        fence=dict(row.fence) if row.fence is not None else None,
        end_plan=dict(row.end_plan) if row.end_plan is not None else None,
    )


def _placement_values(rec: PlacementRecord) -> dict[str, Any]:
    if not rec.key:
        raise RecordError(f"placement of {rec.dag_id}.{rec.task_id} has an empty key; give each try a unique key")
    return {
        "key": rec.key,
        "dag_id": rec.dag_id,
        "task_id": rec.task_id,
        "run_id": rec.run_id,
        "map_index": rec.map_index,
        "try_number": rec.try_number,
        "label": rec.label,
        "decided_at": utc(rec.decided_at),
        "started_at": None if rec.started_at is None else utc(rec.started_at),
        "ended_at": None if rec.ended_at is None else utc(rec.ended_at),
        "outcome": _outcome(rec.outcome).value,
        "gpu_uuids": [str(u) for u in rec.gpu_uuids],
        "host": rec.host,
        "estimate_mib": rec.estimate_mib,
        "estimate_source": rec.estimate_source,
        "peak_mib": rec.peak_mib,
        "summary": rec.summary,
        "reasons": [str(r) for r in rec.reasons],
        "policy": rec.policy,
        "pid": rec.pid,
        "pid_start": rec.pid_start,
        "ti_id": rec.ti_id,
        "fence": rec.fence,
        "end_plan": rec.end_plan,
    }


def _oom_record(row: OomEventRow) -> OomRecord:
    return OomRecord(
        placement_key=row.placement_key,
        dag_id=row.dag_id,
        task_id=row.task_id,
        try_number=row.try_number,
        at=row.at,
        gpu_uuid=row.gpu_uuid,
        peak_mib=row.peak_mib,
        message=row.message,
        id=row.id,
    )


def _outcome(value: TryOutcome | str) -> TryOutcome:
    try:
        return TryOutcome(value)
    except ValueError:
        known = ", ".join(o.value for o in TryOutcome)
        raise RecordError(f"unknown try outcome {value!r}; use one of: {known}") from None


class TryStore(StoreBase):
    """The store's calls on tries and OOM events (part of :class:`~carma_airflow.store.store.Store`).

    ``owner``: the executor this store writes for (its id in ``carma_executor``); every try it
    upserts is recorded as that executor's.  None (a CLI, a task process): owners stay as stored.
    """

    owner: str | None = None

    # -- placements ---------------------------------------------------------------------

    def upsert_placement(self, rec: PlacementRecord) -> int:
        """Insert the try, or replace every field of the stored try with the same key; returns its id."""
        values = _placement_values(rec)
        if rec.owner or self.owner:
            values["owner"] = rec.owner or self.owner
        stmt = self._upsert(PlacementRow, "key", values)
        with self._session(write=True) as session:
            session.execute(stmt, execution_options={"synchronize_session": False})
            row_id = session.scalar(select(PlacementRow.id).where(PlacementRow.key == rec.key))
            assert row_id is not None
            return row_id

    def mark_started(self, key: str, at: Moment) -> bool:
        """The try's process started at ``at``: a waiting try becomes running.  False if no such key."""
        stmt = (
            update(PlacementRow)
            .where(PlacementRow.key == key)
            .values(
                started_at=utc(at),
                outcome=case(
                    (PlacementRow.outcome == TryOutcome.WAITING.value, TryOutcome.RUNNING.value),
                    else_=PlacementRow.outcome,
                ),
            )
        )
        return self._update(stmt)

    def mark_ended(
        self,
        key: str,
        at: Moment,
        outcome: TryOutcome | str,
        peak_mib: int | None = None,
        summary: str | None = None,
    ) -> bool:
        """The try ended at ``at`` with ``outcome`` (success, failed or oom).  False if no such key.

        ``peak_mib`` None keeps the peak already stored; ``summary`` None keeps the summary.
        """
        final = _outcome(outcome)
        if not final.finished:
            raise RecordError(f"mark_ended needs success, failed or oom, not {final.value!r}; use mark_started")
        values: dict[str, Any] = {"ended_at": utc(at), "outcome": final.value}
        if peak_mib is not None:
            values["peak_mib"] = peak_mib
        if summary is not None:
            values["summary"] = summary
        return self._update(update(PlacementRow).where(PlacementRow.key == key).values(**values))

    def mark_launched(self, key: str, pid: int, pid_start: int | None) -> bool:
        """The try's process is ``pid`` (started at ``pid_start`` ticks since boot).  False if no such key."""
        return self._update(update(PlacementRow).where(PlacementRow.key == key).values(pid=pid, pid_start=pid_start))

    def claim_tries(self, keys: list[str], owner: str) -> int:
        """Executor ``owner`` takes over these tries (it adopted them): their placements and
        published reservations become its own.  Returns how many placements changed hands."""
        if not keys:
            return 0
        with self._session(write=True) as session:
            moved = session.execute(
                update(PlacementRow).where(PlacementRow.key.in_(keys)).values(owner=owner),
                execution_options={"synchronize_session": False},
            )
            session.execute(
                update(ReservationRow).where(ReservationRow.key.in_(keys)).values(owner=owner),
                execution_options={"synchronize_session": False},
            )
            return int(getattr(moved, "rowcount", 0) or 0)

    def placement(self, key: str) -> PlacementRecord | None:
        """The try with this key, or None."""
        with self._session() as session:
            row = session.scalar(select(PlacementRow).where(PlacementRow.key == key))
            return None if row is None else _placement_record(row)

    def placements(self, dag_id: str | None = None, limit: int = 500) -> list[PlacementRecord]:
        """The newest ``limit`` tries (of one DAG), newest first."""
        check_limit(limit)
        stmt = select(PlacementRow).order_by(PlacementRow.id.desc()).limit(limit)
        if dag_id is not None:
            stmt = stmt.where(PlacementRow.dag_id == dag_id)
        return self._placements(stmt)

    def latest_for(
        self, dag_id: str, task_id: str, run_id: str | None = None, limit: int = 50
    ) -> list[PlacementRecord]:
        """The tries of one task (in one run), latest try first."""
        check_limit(limit)
        stmt = (
            select(PlacementRow)
            .where(PlacementRow.dag_id == dag_id, PlacementRow.task_id == task_id)
            .order_by(PlacementRow.id.desc())
            .limit(limit)
        )
        if run_id is not None:
            stmt = stmt.where(PlacementRow.run_id == run_id)
        return self._placements(stmt)

    def tries_of(self, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> list[PlacementRecord]:
        """Every try of one task instance (one run, one map index), by try number: what the next
        try's recovery plan and OOM budget are built from, whichever executor ran them."""
        stmt = (
            select(PlacementRow)
            .where(
                PlacementRow.dag_id == dag_id,
                PlacementRow.task_id == task_id,
                PlacementRow.run_id == run_id,
                PlacementRow.map_index == map_index,
            )
            .order_by(PlacementRow.try_number, PlacementRow.id)
        )
        return self._placements(stmt)

    def running(self) -> list[PlacementRecord]:
        """Tries still waiting or running, oldest first (to rebuild reservations after a restart)."""
        active = [o.value for o in ACTIVE_OUTCOMES]
        return self._placements(select(PlacementRow).where(PlacementRow.outcome.in_(active)).order_by(PlacementRow.id))

    def _placements(self, stmt: Any) -> list[PlacementRecord]:
        with self._session() as session:
            return [_placement_record(row) for row in session.scalars(stmt)]

    # -- OOM events ---------------------------------------------------------------------

    def record_oom(self, ev: OomRecord) -> int:
        """Store an out-of-memory event; returns its id.  One event per try: the same try's event
        made again (a write replayed from a killed executor's journal) returns the first one's id,
        so a replay never spends an OOM retry twice."""
        same = select(OomEventRow.id).where(
            OomEventRow.placement_key == ev.placement_key, OomEventRow.try_number == ev.try_number
        )
        with self._session() as session:
            known = session.scalars(same.limit(1)).first()
        if known is not None:
            return int(known)
        row = OomEventRow(
            placement_key=ev.placement_key,
            dag_id=ev.dag_id,
            task_id=ev.task_id,
            try_number=ev.try_number,
            gpu_uuid=ev.gpu_uuid,
            peak_mib=ev.peak_mib,
            message=ev.message,
            at=utc(ev.at),
        )
        with self._session(write=True) as session:
            session.add(row)
            session.flush()
            return row.id

    def ooms(self, dag_id: str | None = None, task_id: str | None = None, limit: int = 100) -> list[OomRecord]:
        """The newest ``limit`` OOM events (of one DAG, of one task), newest first."""
        check_limit(limit)
        stmt = select(OomEventRow).order_by(OomEventRow.at.desc(), OomEventRow.id.desc()).limit(limit)
        if dag_id is not None:
            stmt = stmt.where(OomEventRow.dag_id == dag_id)
        if task_id is not None:
            stmt = stmt.where(OomEventRow.task_id == task_id)
        with self._session() as session:
            return [_oom_record(row) for row in session.scalars(stmt)]
