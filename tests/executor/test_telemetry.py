"""Telemetry attributed to tries (executor/learning/telemetry.py): per process by launcher session, else
the GPU's activity while the try is alone; co-tenants counted per sample; each sample once."""

from __future__ import annotations

from carma_airflow.core.activity import hinted_activity
from carma_airflow.core.gpu import Tenant
from carma_airflow.executor.learning import Attribution
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.monitor.base import GpuSample, ProcessUsage


class _Handle:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def _try(rkey: str, pid: int, gpu: str) -> Try:
    return Try(key=rkey, rkey=rkey, ti=None, state=TryState.RUNNING, gpu_uuids=(gpu,), handle=_Handle(pid))  # type: ignore[arg-type]


def _sample(uuid: str, at: float, smact: float, processes: tuple[ProcessUsage, ...] = ()) -> GpuSample:
    return GpuSample(uuid, 0, "A100-40GB", "h", 40960, 1000, 39960, at, smact=smact, processes=processes)


SESSIONS = {101: 100, 102: 100, 201: 200}  # task process -> its try's session (the try's pid)


def test_a_tries_own_processes_give_its_activity_by_session() -> None:
    seen = Attribution(session=SESSIONS.get)
    a = _try("a", 100, "G0")
    for i in range(3):  # a's two processes, and a process of another try on the same GPU
        procs = (
            ProcessUsage(101, 500, sm_util=0.2),
            ProcessUsage(102, 500, sm_util=0.4),
            ProcessUsage(201, 9, sm_util=0.9),
        )
        seen.observe({"G0": _sample("G0", float(i), 0.9, procs)}, [a], lambda u: [])
    got = seen.conclude("a")
    assert got.activity is not None and got.activity.source == "process"
    assert abs(got.activity.sm_activity - 0.3) < 1e-9 and got.alone


def test_without_per_process_figures_the_gpu_counts_only_while_the_try_is_alone() -> None:
    seen = Attribution(session=SESSIONS.get)
    a = _try("a", 100, "G0")
    b = Tenant("b", "dag.b", 1000, 0.0, activity=hinted_activity(0.7))
    seen.observe({"G0": _sample("G0", 1.0, 0.25)}, [a], lambda u: [])
    seen.observe({"G0": _sample("G0", 2.0, 0.95)}, [a], lambda u: [b])  # shared: not a's own activity
    seen.observe({"G0": _sample("G0", 2.0, 0.95)}, [a], lambda u: [b])  # the same sample again: ignored
    got = seen.conclude("a")
    assert got.activity is not None and got.activity.source == "gpu-alone" and got.activity.sm_activity == 0.25
    assert not got.alone
    shares = sorted((s.share, s.co_tenants) for s in got.segments)
    assert [share for share, _ in shares] == [0.5, 0.5] and shares[1][1] == (0.7,)


def test_a_try_never_sampled_teaches_nothing() -> None:
    seen = Attribution(session=SESSIONS.get)
    got = seen.conclude("nobody")
    assert got.activity is None and not got.alone and got.segments == ()


def test_co_tenants_are_kept_with_their_task_types() -> None:
    # issue 23: each set of co-tenants with their task types (a mapped instance's label without its
    # index, as the interference terms are kept), in the order of their activities
    seen = Attribution(session=SESSIONS.get)
    a = _try("a", 100, "G0")
    b = Tenant("b", "dag.b[3]", 1000, 0.0, activity=hinted_activity(0.7))
    c = Tenant("c", "other.c", 1000, 0.0, activity=hinted_activity(0.2))
    seen.observe({"G0": _sample("G0", 1.0, 0.9)}, [a], lambda u: [b])
    seen.observe({"G0": _sample("G0", 2.0, 0.9)}, [a], lambda u: [b, c])
    seen.observe({"G0": _sample("G0", 3.0, 0.9)}, [a], lambda u: [b, c])
    got = seen.conclude("a")
    by_share = sorted(got.segments, key=lambda s: s.share)
    assert [(s.co_tenants, s.co_tasks) for s in by_share] == [((0.7,), ("dag.b",)), ((0.7, 0.2), ("dag.b", "other.c"))]
    assert got.co_tasks == ("dag.b", "other.c") and not got.alone
