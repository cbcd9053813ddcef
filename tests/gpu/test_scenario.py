"""The kit's scenario, checked against carma's own placer (no processes, no GPU)."""

from __future__ import annotations

import sys

import pytest
from gpukit.workload import GIB, MIN_GPU_MIB, TaskSpec, WorkloadError, kit_tasks, with_steps

from carma_airflow.core.decision import Outcome
from carma_airflow.core.gpu import ClusterView, GpuSpec, GpuState, Tenant
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.risk import MetricWindow
from carma_airflow.core.task import MemoryNeed, TaskRequest


def _request(spec: TaskSpec) -> TaskRequest:
    return TaskRequest(key=f"{spec.name}#1", label=spec.name, memory=MemoryNeed(spec.declared_mib, "declared"))


def _gpu_with_hog(total: int, hog: TaskSpec, hog_holds: int) -> ClusterView:
    spec = GpuSpec("test-gpu", total, 132, 70.0, 700.0)
    state = GpuState(
        uuid="GPU-0",
        index=0,
        spec=spec,
        free_mib=total - hog_holds,
        used_mib=hog_holds,
        window=MetricWindow((0.15,) * 10, (0.1,) * 10, (0.1,) * 10),
        tenants=(Tenant(hog.name + "#1", hog.name, hog.declared_mib, placed_at=0.0),),
    )
    return ClusterView(now=100.0, gpus=(state,))


@pytest.mark.parametrize("total", [MIN_GPU_MIB, 40960, 81559, 143771])
def test_only_the_underdeclared_task_fits_beside_the_hog(total: int) -> None:
    tasks = {t.name: t for t in kit_tasks(total)}
    hog = tasks["memory_hog"]
    view = _gpu_with_hog(total, hog, hog.sim_peak_mib)
    placer = Placer(make_policy("interference-aware"))
    for name, spec in tasks.items():
        if name == "memory_hog":
            continue
        decision = placer.decide(_request(spec), view)
        if name == "underdeclared":
            assert decision.placed, decision.summary
        else:
            assert decision.outcome is Outcome.NOT_NOW, f"{name}: {decision.summary}"
    under = tasks["underdeclared"]
    # it really grows past what the hog leaves, and fits on an empty GPU of that size
    assert under.ramp_mib > total - hog.sim_peak_mib
    assert under.ramp_mib < total - 4 * GIB
    assert hog.ballast_mib + 2 * GIB <= hog.declared_mib


def test_exclusive_policy_never_places_beside_the_hog() -> None:
    tasks = {t.name: t for t in kit_tasks(143771)}
    view = _gpu_with_hog(143771, tasks["memory_hog"], tasks["memory_hog"].sim_peak_mib)
    decision = Placer(make_policy("exclusive")).decide(_request(tasks["underdeclared"]), view)
    assert decision.outcome is Outcome.NOT_NOW


def test_small_gpu_and_bad_scale_are_refused_with_one_line() -> None:
    with pytest.raises(WorkloadError, match="at least 24 GiB"):
        kit_tasks(16 * GIB)
    with pytest.raises(WorkloadError, match="--scale"):
        kit_tasks(143771, scale=0)


def test_specs_survive_json_and_take_the_first_runs_steps() -> None:
    tasks = kit_tasks(81559, scale=0.5)
    assert all(t.seconds > 0 for t in tasks)
    stepped = with_steps(tasks, {"cnn_small": 420})
    again = [TaskSpec.from_json(t.to_json()) for t in stepped]
    assert again == stepped
    by_name = {t.name: t for t in again}
    assert by_name["cnn_small"].steps == 420
    assert by_name["cnn_wide"].steps is None


def test_a_crashed_trys_peak_counts_what_the_gpu_counted_for_its_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on an H200 (docs/measured.md, round 35): PyTorch's reserved memory left out the
    CUDA context, about 760 MiB; the message's "this process has" counts it, as the executor's
    NVML listener does, so the retry is planned from that."""
    from gpukit.train import LEDGER_ENV, _peak_after_failure

    monkeypatch.delenv(LEDGER_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # no CUDA here: only the message says it
    message = (
        "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which "
        "159.56 MiB is free. Process 1770 has 132.26 GiB memory in use. Including non-PyTorch memory, this "
        "process has 7.37 GiB memory in use. Of the allocated memory 6.62 GiB is allocated by PyTorch, and "
        "10.82 MiB is reserved by PyTorch but unallocated."
    )
    assert _peak_after_failure(message) == int(7.37 * 1024)
    assert _peak_after_failure("RuntimeError: something else") is None
