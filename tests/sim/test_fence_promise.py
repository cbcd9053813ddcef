"""A placed try's promise holds from its placement (issue 22, item 0), in the simulator.

The pattern: a grower declares 8 GiB and grows to 30 GiB; a neighbour declaring 20 GiB spends
15 s on the CPU (loading data) and then allocates 12 GiB.  Unfenced, the grower takes what the
neighbour was promised and the neighbour crashes.  Fenced, the neighbour's reservation counts
against the grower's cap from the neighbour's placement on, allocated or not: the grower is the
one stopped, and the reason names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.sim import SimConfig, load_catalog, load_trace
from carma_airflow.sim.engine import Simulation
from carma_airflow.sim.metrics import SimResult

GROWER = "1,{t},grower,8192,5,30720,5"  # declared 8 GiB, allocates 8 GiB 5 s in, 30 GiB 5 s later
NEIGHBOUR = "2,{t},loader,20480,15,,"  # declared 20 GiB, 15 s on the CPU, then 12 GiB
HEADER = "job_id,submit_s,task,memory_mib,load_s,grows_to_mib,grows_after_s"
CATALOG = """task,script,family,batch_size,epochs,gpus,peak_mem_mib,horus_mib,faketensor_mib,gpumemnet_mib,solo_minutes
grower,grower,cnn,32,1,1,8192,8192,8192,8192,10
loader,loader,cnn,32,1,1,12288,12288,12288,12288,10
"""


def _run(tmp_path: Path, order: str, *, isolation: str = "auto", host: str = "framework", rule: str = "promise",
         grower: str = GROWER) -> tuple[SimResult, Simulation]:  # fmt: skip
    (tmp_path / "cat.csv").write_text(CATALOG)
    rows = [grower.format(t=0), NEIGHBOUR.format(t=2)] if order == "grower first" else [
        NEIGHBOUR.format(t=0), grower.format(t=2)
    ]  # fmt: skip
    (tmp_path / "trace.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    arrivals = load_trace(tmp_path / "trace.csv", load_catalog(tmp_path / "cat.csv"))
    cfg = SimConfig(
        gpus=tuple(parse_gpu_list("1xA100-40GB")), estimator="oracle", host=host, isolation=isolation, cap_rule=rule
    )
    sim = Simulation(cfg)
    return sim.run(arrivals), sim


def _crashed(result: SimResult) -> list[tuple[int, str]]:
    return [(e.job_id, e.reason) for e in result.timeline if e.outcome == "oom"]


def _placed_together(result: SimResult) -> bool:
    first = {t.job_id: t.first_start_s for t in result.tasks}
    return first[1] is not None and first[2] is not None and abs(first[1] - first[2]) == 2.0


@pytest.mark.parametrize("order", ["grower first", "neighbour first"])
def test_unfenced_the_neighbour_crashes(tmp_path: Path, order: str) -> None:
    result, _ = _run(tmp_path, order, isolation="none")
    assert _placed_together(result)
    assert [job for job, _ in _crashed(result)] == [2]  # the neighbour that stayed within its 20 GiB
    assert result.victims == 1


@pytest.mark.parametrize("order", ["grower first", "neighbour first"])
@pytest.mark.parametrize(
    ("host", "rule"),
    [
        ("framework", "promise"),
        ("framework", "live"),
        ("mps", "promise"),
        ("mps", "live"),
        ("driver", "promise"),
        ("driver", "live"),
    ],
)
def test_fenced_the_grower_is_stopped_and_named(tmp_path: Path, order: str, host: str, rule: str) -> None:
    result, sim = _run(tmp_path, order, host=host, rule=rule)
    assert sim.fence.model.mode.value == host  # auto resolves to the host's strongest mechanism
    assert _placed_together(result)
    crashes = _crashed(result)
    assert [job for job, _ in crashes] == [1], crashes
    assert "grower[1]" in crashes[0][1] and "past its cap" in crashes[0][1]
    assert result.victims == 0
    assert all(t.outcome == "success" for t in result.tasks)
    neighbour = next(t for t in result.tasks if t.job_id == 2)
    assert neighbour.tries == 1 and neighbour.oom_crashes == 0


def test_a_cap_fixed_at_start_beside_the_co_tenants_then_present_cannot_keep_a_later_promise(tmp_path: Path) -> None:
    """``protective`` sets the grower's cap when it is alone: the whole GPU.  The neighbour placed
    after it is not protected (the reason the rule is not a default), while placed before it, it is."""
    later, _ = _run(tmp_path, "grower first", rule="protective")
    assert [job for job, _ in _crashed(later)] == [2] and later.victims == 1
    earlier, _ = _run(tmp_path, "neighbour first", rule="protective")
    assert [job for job, _ in _crashed(earlier)] == [1] and earlier.victims == 0


def test_a_live_cap_has_an_exposure_window_until_its_re_set(tmp_path: Path) -> None:
    """Under framework + live the grower's cap is re-set about 2 s after the neighbour arrives (a
    heartbeat and the try's follower); a grower that allocates within that window takes the memory."""
    quick = "1,{t},grower,8192,1,30720,1.5"  # grows 2.5 s in: 0.5 s after the neighbour's placement
    exposed, _ = _run(tmp_path, "grower first", rule="live", grower=quick)
    assert [job for job, _ in _crashed(exposed)] == [2]
    slow, _ = _run(tmp_path, "grower first", rule="live")  # grows 10 s in: after the re-set
    assert [job for job, _ in _crashed(slow)] == [1]


def test_the_result_names_the_mechanism_and_rule(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, "grower first", host="mps", rule="live")
    summary = result.summary()
    assert (summary["host"], summary["isolation"], summary["mechanism"]) == ("mps", "auto", "mps")
    assert summary["cap_rule"] == "live"  # the pinned limit fixed at start, PyTorch's fraction live beneath
    assert "pinned limit fixed at the try's start" in str(summary["fence"])
    assert [job for job, _ in _crashed(result)] == [1]  # the live part keeps the later neighbour's
