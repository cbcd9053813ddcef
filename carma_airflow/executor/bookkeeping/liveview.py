"""What the executor publishes about itself on a clock: the UI page's live snapshot and a
downsampled history of GPU telemetry.  Both are best-effort store writes (writes.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.gpu import ClusterView
from carma_airflow.core.task import TaskRequest
from carma_airflow.executor.bookkeeping.snapshot import build_snapshot
from carma_airflow.executor.bookkeeping.writes import PutSnapshot, RecordSamples, utc
from carma_airflow.monitor.base import GpuSample
from carma_airflow.store.live_snapshots import name_of
from carma_airflow.store.records import SampleRecord

SAMPLES_EVERY_S = 30.0  # one row of GPU telemetry history per GPU this often


REASONS_EVERY_S = 1.0
REASONS_ALWAYS_BELOW = 64  # waiting tries up to which every pass gives reasons (cheap anyway)


class LiveView:
    def __init__(self, settings: CarmaSettings, policy: str, queue: str, executor_id: str) -> None:
        """``executor_id``: the id this executor beats under (peers.py); its snapshot's name."""
        self.settings, self.policy, self.queue = settings, policy, queue
        self.executor_id = executor_id
        self.pass_ms: deque[float] = deque(maxlen=256)  # the latest scheduling passes
        self._samples_at = 0.0
        self._snapshot_at = 0.0
        self._reasons_at = 0.0

    def reasons_due(self, now: float, waiting: int) -> bool:
        """Whether this pass also decides why each try that stays waits (the UI's and ``carma
        why``'s reason, the store's and the log's).  A pass without places and refuses exactly
        the same tries (core/cycle.py); with the default queue both decide a few tries per
        shape (a shape's other waiting tries share its first one's decision), so what reasons
        cost is this module's caller comparing every waiting try's reason with its last: a
        short queue gets reasons at every pass, a deep one once every ``REASONS_EVERY_S``."""
        if waiting <= REASONS_ALWAYS_BELOW or now - self._reasons_at >= REASONS_EVERY_S:
            self._reasons_at = now
            return True
        return False

    def samples_due(self, now: float, samples: Sequence[GpuSample]) -> RecordSamples | None:
        if now - self._samples_at < SAMPLES_EVERY_S:
            return None
        self._samples_at = now
        return RecordSamples(sample_records(samples), SAMPLES_EVERY_S)

    def snapshot_due(self, now: float) -> bool:
        return now - self._snapshot_at >= self.settings.snapshot_period

    def snapshot(
        self,
        now: float,
        view: ClusterView,
        waiting: Sequence[tuple[TaskRequest, str]],
        running: int,
        pending_writes: int,
        samples: Sequence[GpuSample],
        quarantined: Mapping[str, str] | None = None,
    ) -> PutSnapshot:
        """``quarantined``: GPU UUID -> why the executor itself keeps tries off it (a faulted MPS server)."""
        self._snapshot_at = now
        body = build_snapshot(
            now=now,
            settings=self.settings,
            policy=self.policy,
            queue=self.queue,
            view=view,
            waiting=waiting,
            running=running,
            pass_ms=list(self.pass_ms),
            pending_writes=pending_writes,
            errors={**(quarantined or {}), **{s.uuid: s.error for s in samples if s.error}},
            executor_id=self.executor_id,
        )
        return PutSnapshot(name_of(self.executor_id), now, body)


def sample_records(samples: Iterable[GpuSample]) -> tuple[SampleRecord, ...]:
    return tuple(
        SampleRecord(
            host=s.host,
            gpu_uuid=s.uuid,
            gpu_index=s.index,
            name=s.name,
            at=utc(s.at),
            memory_total_mib=s.memory_total_mib,
            memory_used_mib=s.memory_used_mib,
            smact=s.smact,
            smocc=s.smocc,
            drama=s.drama,
            power_w=s.power_w,
            energy_j=s.energy_j,
            error=s.error,
        )
        for s in samples
    )


__all__ = ["SAMPLES_EVERY_S", "LiveView"]
