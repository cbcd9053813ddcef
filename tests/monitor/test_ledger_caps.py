"""The simulated ledger holds a fenced process to its cap, even where the GPU has room."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.recovery import FailureKind, asked_mib, classify_failure
from carma_airflow.core.sharing import ActivityProfile
from carma_airflow.monitor.ledger import Ledger, SimulatedCudaOOM, sim_uuid

P = ActivityProfile(0.5, 0.3, 0.25)
GPU = sim_uuid(0)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(tmp_path / "ledger.json")
    led.init([gpu_spec("A100-40GB")])
    return led


def test_fixed_cap_refuses_past_the_cap_with_room_left(ledger: Ledger) -> None:
    me = os.getpid()
    ledger.allocate(me, GPU, 8192, P, "grower", promise_mib=10240, cap_mib=10240)
    with pytest.raises(SimulatedCudaOOM) as err:
        ledger.allocate(me, GPU, 4096, P, "grower", promise_mib=10240, cap_mib=10240)
    assert err.value.cap_mib == 10240 and err.value.free_mib == 40960 - 8192
    failure = classify_failure("SimulatedCudaOOM", str(err.value))
    assert failure.kind is FailureKind.CAP_OOM and failure.is_oom
    assert asked_mib(str(err.value)) == 8192 + 4096
    assert ledger.peak(me) == 8192  # the refused allocation took nothing


def test_a_re_set_cap_holds_the_next_allocation(ledger: Ledger) -> None:
    # a live cap is what its mechanism was re-set to (the executor's cap file or leaf limit): the
    # ledger holds each allocation to the cap it is given, nothing it works out from co-tenants
    neighbour = os.getppid()  # alive for the test's length; stands for the 12 GiB try
    ledger.allocate(neighbour, GPU, 3072, P, "neighbour", promise_mib=12288, cap_mib=40960)
    me = os.getpid()
    ledger.allocate(me, GPU, 8192, P, "grower", promise_mib=8192, cap_mib=40960)  # alone: the whole GPU
    with pytest.raises(SimulatedCudaOOM, match="past its cap"):  # re-set to leave the neighbour's 12 GiB
        ledger.allocate(me, GPU, 22528, P, "grower", promise_mib=8192, cap_mib=40960 - 12288)
    ledger.allocate(me, GPU, 40960 - 12288 - 8192, P, "grower", promise_mib=8192, cap_mib=40960 - 12288)
    ledger.allocate(neighbour, GPU, 12288 - 3072, P, "neighbour", promise_mib=12288, cap_mib=40960 - 20480)


def test_unfenced_growth_crashes_the_neighbour(ledger: Ledger) -> None:
    neighbour, me = os.getppid(), os.getpid()
    ledger.allocate(neighbour, GPU, 3072, P, "neighbour")
    ledger.allocate(me, GPU, 8192, P, "grower")
    ledger.allocate(me, GPU, 22528, P, "grower")  # nothing stops it
    with pytest.raises(SimulatedCudaOOM) as err:
        ledger.allocate(neighbour, GPU, 9216, P, "neighbour")
    assert err.value.cap_mib is None
    assert classify_failure("SimulatedCudaOOM", str(err.value)).kind is FailureKind.CUDA_OOM
