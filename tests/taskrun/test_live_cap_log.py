"""A simulated try's log says each re-set of its live cap, as a real PyTorch try's does (issue 22:
logs that say the fence actually in force, with its number, per GPU)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from carma_airflow.core.fencing import IsolationMode
from carma_airflow.taskrun.fence_env import SIM_LEAF_ENV, TryFence
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, SimulatedCaps, write_caps


def _follow(caps: SimulatedCaps, want: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while caps.current[0] != want and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("mode", "environ", "says"),
    [
        (
            IsolationMode.FRAMEWORK,
            {},
            "[carma] memory cap now 20000 MiB, 30000 MiB per GPU (PyTorch's fraction, re-set as co-tenants changed; "
            "played by the simulated GPUs' ledger)",
        ),
        (
            IsolationMode.MPS,
            {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=36000M,1=36000M"},
            "[carma] memory cap now 20000 MiB, 30000 MiB per GPU (PyTorch's fraction, re-set as co-tenants changed; "
            "played by the simulated GPUs' ledger, beneath MPS's pinned memory limit of 36000 MiB per GPU set at "
            "the client's start)",
        ),
    ],
)
def test_a_re_set_cap_is_said_in_the_try_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: IsolationMode, environ: dict[str, str], says: str
) -> None:
    path = tmp_path / "try.cap"
    write_caps(path, [38000, 38000])
    fence = TryFence(mode, (8192, 8192), (38000, 38000), live=True, rule="live")
    caps = SimulatedCaps(fence, {CAP_FILE_ENV: str(path), **environ}, period_s=0.02)
    try:
        write_caps(path, [20000, 30000])  # a co-tenant was placed
        _follow(caps, 20000)
    finally:
        caps.stop()
    assert caps.current == [20000, 30000]
    assert says in capsys.readouterr().out


def test_under_a_simulated_driver_the_leafs_limit_holds_and_nothing_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "try.cap"
    write_caps(path, [38000])
    fence = TryFence(IsolationMode.DRIVER, (8192,), (38000,), live=True, rule="live")
    caps = SimulatedCaps(fence, {CAP_FILE_ENV: str(path), SIM_LEAF_ENV: "d/t/r/-1#1"}, period_s=0.02)
    try:
        write_caps(path, [20000])
        _follow(caps, 20000)
    finally:
        caps.stop()
    assert caps.cap_mib(0) is None  # the ledger's leaf limit holds it, which the executor re-sets
    assert "memory cap now" not in capsys.readouterr().out
