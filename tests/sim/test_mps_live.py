"""MPS under ``isolation_cap = live`` in the simulator (issue 22): the client's pinned limit fixed
at its start (the GPU less its co-tenants then, plus the margin) with PyTorch's fraction re-set
beneath it as co-tenants come and go (core/fencing.py ``FenceModel.start_bound``).

A grower declared 8 GiB starts beside a short try holding 12 GiB and grows to 20 GiB after the
short try has left: past its reservation and margin (10 GiB, where ``promise`` stops it), within
the memory the departure freed.  A neighbour placed after the grower keeps its promise (the live
part: tests/sim/test_fence_promise.py, ``mps``/``live``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import SimConfig, load_catalog, load_trace
from carma_airflow.sim.engine import Simulation
from carma_airflow.sim.metrics import SimResult

HEADER = "job_id,submit_s,task,memory_mib,load_s,grows_to_mib,grows_after_s"
ROWS = ["1,0,short,12288,1,,", "2,2,grower,8192,5,{grows_to},300"]  # the grower grows 300 s in, the short try ran 60
CATALOG = """task,script,family,batch_size,epochs,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes
short,short,cnn,32,1,1,12288,12288,12288,12288,1
grower,grower,cnn,32,1,1,8192,8192,8192,8192,10
"""


def _run(tmp_path: Path, rule: str, grows_to: int = 20480, host: str = "mps") -> tuple[SimResult, Simulation]:
    (tmp_path / "cat.csv").write_text(CATALOG)
    rows = [row.format(grows_to=grows_to) for row in ROWS]
    (tmp_path / "trace.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    arrivals = load_trace(tmp_path / "trace.csv", load_catalog(tmp_path / "cat.csv"))
    cfg = SimConfig(
        gpus=tuple(parse_gpu_list("1xA100-40GB")), estimator="oracle", host=host, isolation="auto", cap_rule=rule
    )
    sim = Simulation(cfg)
    return sim.run(arrivals), sim


def _placed_together_and_apart_when_it_grows(result: SimResult) -> bool:
    short = next(e for e in result.timeline if e.job_id == 1)
    grower = min((e for e in result.timeline if e.job_id == 2), key=lambda e: e.start)
    return short.start <= grower.start < short.end < grower.start + 300


def test_an_mps_try_whose_co_tenant_left_may_grow_into_what_it_freed(tmp_path: Path) -> None:
    result, sim = _run(tmp_path, "live")
    assert sim.fence.model.start_bound and sim.fence.model.mode.value == "mps"
    assert _placed_together_and_apart_when_it_grows(result)
    assert result.oom_crashes == 0 and result.victims == 0
    assert all(t.outcome == "success" and t.tries == 1 for t in result.tasks)


def test_under_promise_it_is_stopped_at_reservation_and_margin(tmp_path: Path) -> None:
    """What the test above can fail on: MPS's pinned limit at the promise (8 + 2 GiB), the old default."""
    result, _ = _run(tmp_path, "promise")
    assert _placed_together_and_apart_when_it_grows(result)
    assert [e.job_id for e in result.timeline if e.outcome == "oom"] == [2]


@pytest.mark.parametrize("host", ["mps", "framework"])
def test_the_pinned_limit_fixed_at_start_still_holds_beneath_the_live_cap(tmp_path: Path, host: str) -> None:
    """Grown to 31 GiB once the short try left: past the pinned limit set beside it (40,960 - 12,288
    + 2,048 margin = 30,720; a simulated GPU's caps keep no reserve), which MPS never re-reads;
    framework live lets it."""
    result, _ = _run(tmp_path, "live", grows_to=31744, host=host)
    assert _placed_together_and_apart_when_it_grows(result)
    crashes = [(e.job_id, e.reason) for e in result.timeline if e.outcome == "oom"]
    if host == "framework":
        assert crashes == []
    else:
        assert [job for job, _ in crashes] == [2] and "past its cap of 30720 MiB" in crashes[0][1]
        assert result.victims == 0
