"""build_state: what the page shows, from a store filled as a running executor fills it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from ui_helpers import HOST, OOM_MESSAGE, UUIDS, WAIT_REASON, placement, snapshot_body

from carma_airflow.core.interference import CollocationObservation, InterferenceModel, slowdown
from carma_airflow.store import TryOutcome
from carma_airflow.store.store import Store
from carma_airflow.ui.state import STALE_AFTER_S, build_state
from carma_airflow.ui.timeline import NO_GPU

pytestmark = pytest.mark.db


def _lane(state: dict[str, Any], key: str) -> dict[str, Any]:
    return next(lane for lane in state["timeline"]["lanes"] if lane["key"] == key)


def test_gpus_with_memory_activity_health_risk_and_tenants(filled: Store, now: datetime) -> None:
    state = build_state(filled, now=now)
    gpus = state["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2]
    g0, g1, g2 = gpus
    assert (g0["memory_used_mib"], g0["memory_total_mib"], g0["memory_used_pct"]) == (33000, 40960, 80.6)
    assert g0["smact"] == pytest.approx(0.82)
    assert (g0["health"], g0["risk"]) == ("healthy", "high")
    assert [t["label"] for t in g0["tenants"]] == ["carma_demo.bert_large", "carma_demo.resnet3"]
    assert g0["reserved_mib"] == 32000
    assert g0["tenants"][0]["for_s"] == pytest.approx(96, abs=2)
    assert [t["label"] for t in g1["tenants"]] == ["carma_demo.maskrcnn"]
    assert (g2["health"], g2["health_reason"], g2["smact"]) == ("quarantined", "NVML: GPU is lost (Xid 79)", None)
    ex = state["executors"]
    assert len(ex) == 1
    assert ex[0]["host"] == HOST and not ex[0]["stale"] and ex[0]["policy"] == "interference-aware"
    assert (ex[0]["dispatch"], ex[0]["pass_median_ms"], ex[0]["pending_store_writes"]) == ("local", 0.8, 0)


def test_waiting_tasks_carry_their_reason(filled: Store, now: datetime) -> None:
    waiting = build_state(filled, now=now)["waiting"]
    assert [(w["label"], w["reason"], w["memory_mib"]) for w in waiting] == [("carma_demo.vgg3", WAIT_REASON, 30000)]
    assert waiting[0]["waiting_s"] == pytest.approx(66, abs=2)


def test_timeline_puts_each_try_on_its_gpus_and_stacks_collocated_tries(filled: Store, now: datetime) -> None:
    state = build_state(filled, now=now)
    gpu0 = _lane(state, UUIDS[0])
    assert gpu0["label"] == "GPU 0"
    by_key = {b["key"]: b for b in gpu0["bars"]}
    assert set(by_key) == {
        "carma_demo/maskrcnn/r1/-1/1",
        "carma_demo/bert_large/r1/-1/1",
        "carma_demo/resnet3/r1/-1/1",
    }
    assert by_key["carma_demo/maskrcnn/r1/-1/1"]["outcome"] == "oom"
    # bert_large overlaps both maskrcnn (until it crashed) and resnet3: they shared GPU 0
    assert by_key["carma_demo/bert_large/r1/-1/1"]["row"] != by_key["carma_demo/resnet3/r1/-1/1"]["row"]
    assert gpu0["rows"] == 2
    # a running try reaches now; a finished one ends before it
    assert by_key["carma_demo/bert_large/r1/-1/1"]["x1"] == pytest.approx(1.0)
    assert by_key["carma_demo/maskrcnn/r1/-1/1"]["x1"] < 0.5
    # the 2-GPU try shows on both GPUs, including one no live snapshot lists
    assert [b["key"] for b in _lane(state, UUIDS[1])["bars"]].count("carma_demo/ddp_gpt2/r1/-1/1") == 1
    assert [b["key"] for b in _lane(state, UUIDS[3])["bars"]] == ["carma_demo/ddp_gpt2/r1/-1/1"]
    # a try with no GPU yet is on the last lane
    assert [(b["key"], b["kind"]) for b in _lane(state, NO_GPU)["bars"]] == [("carma_demo/vgg3/r1/-1/1", "wait")]
    rows = state["timeline"]["placements"]
    assert len(rows) == 6 and rows[0]["label"] == "carma_demo.vgg3"  # newest first
    assert {"GPU 1"} <= set(next(p for p in rows if p["task_id"] == "ddp_gpt2")["gpus"])


def test_oom_events_show_their_recovery(filled: Store, now: datetime) -> None:
    state = build_state(filled, now=now)
    (oom,) = state["ooms"]
    assert (oom["label"], oom["try_number"], oom["gpus"], oom["peak_mib"]) == (
        "carma_demo.maskrcnn",
        1,
        ["GPU 0"],
        28606,
    )
    assert oom["message"] == OOM_MESSAGE
    assert oom["recovery"]["outcome"] == "running"
    assert oom["recovery"]["text"] == "retrying: try 2 runs on GPU 1"
    # the retry then succeeds
    filled.mark_ended("carma_demo/maskrcnn/r1/-1/2", now, TryOutcome.SUCCESS, peak_mib=28606)
    oom = build_state(filled, now=now)["ooms"][0]
    assert oom["recovery"]["text"] == "recovered: try 2 succeeded on GPU 1"


def test_oom_without_a_retry_yet(store: Store, now: datetime) -> None:
    from carma_airflow.store import OomRecord

    store.upsert_placement(placement("solo", 1, TryOutcome.OOM, [0], now - timedelta(seconds=50), ran=10))
    store.record_oom(OomRecord("carma_demo/solo/r1/-1/1", "carma_demo", "solo", 1, now, gpu_uuid=UUIDS[0]))
    (oom,) = build_state(store, now=now)["ooms"]
    assert oom["recovery"] is None
    assert oom["gpus"] == [UUIDS[0][:12] + "…"]  # no snapshot: the GPU is known by its UUID only


def test_an_old_snapshot_means_the_executor_is_not_running(store: Store, now: datetime) -> None:
    at = now - timedelta(seconds=STALE_AFTER_S + 65)
    store.put_snapshot(f"executor:{HOST}", at, snapshot_body(at))
    state = build_state(store, now=now)
    (ex,) = state["executors"]
    assert ex["stale"] and ex["age_s"] == pytest.approx(95, abs=1)
    assert all(g["snapshot_stale"] for g in state["gpus"])


def test_no_snapshot_no_placements(store: Store, now: datetime) -> None:
    state = build_state(store, now=now)
    assert state["executors"] == [] and state["gpus"] == [] and state["waiting"] == [] and state["ooms"] == []
    assert state["timeline"]["lanes"] == [] and state["timeline"]["placements"] == []


def test_snapshots_of_another_version_or_with_bad_values_do_not_break_the_page(store: Store, now: datetime) -> None:
    store.put_snapshot("executor:future", now, {"version": 2, "host": "future", "gpus": [{"uuid": "x"}]})
    body = snapshot_body(now, host="odd")
    body["gpus"][0].update(memory_used_mib="lots", smact=float("nan"), tenants="none", index=None)
    body["waiting"] = [{"label": 3, "since": "yesterday"}, "not a dict"]
    store.put_snapshot("executor:odd", now, body)
    state = build_state(store, now=now)
    problems = {e["host"]: e["problem"] for e in state["executors"]}
    assert problems == {"future": "snapshot version 2 is not understood", "odd": None}
    assert {g["host"] for g in state["gpus"]} == {"odd"}  # the future snapshot's GPUs are not guessed at
    odd0 = next(g for g in state["gpus"] if g["uuid"] == UUIDS[0])
    assert (odd0["memory_used_mib"], odd0["smact"], odd0["tenants"], odd0["index"]) == (0, None, [], 0)
    assert [(w["label"], w["waiting_s"]) for w in state["waiting"]] == [("", 0.0)]


def test_two_hosts_are_named_in_gpu_labels(store: Store, now: datetime) -> None:
    store.put_snapshot("executor:a", now, snapshot_body(now, host="a"))
    body = snapshot_body(now, host="b")
    for g in body["gpus"]:
        g["uuid"] = g["uuid"].replace("GPU-5f", "GPU-6f")
        g["host"] = "b"
    store.put_snapshot("executor:b", now, body)
    lanes = [lane["label"] for lane in build_state(store, now=now)["timeline"]["lanes"]]
    assert lanes[:4] == ["a GPU 0", "a GPU 1", "a GPU 2", "b GPU 0"]


def test_the_window_drops_older_tries(filled: Store, now: datetime) -> None:
    filled.upsert_placement(
        placement("yesterday", 1, TryOutcome.SUCCESS, [2], now - timedelta(hours=20), ran=60, run_id="old")
    )
    auto = build_state(filled, now=now)["timeline"]
    assert auto["window_s"] == pytest.approx(20 * 3600 * 1.03, rel=0.01)
    recent = build_state(filled, now=now, window_s=600)["timeline"]
    assert recent["window_s"] == 600
    keys = {b["key"] for lane in recent["lanes"] for b in lane["bars"]}
    assert "carma_demo/yesterday/old/-1/1" not in keys and "carma_demo/bert_large/r1/-1/1" in keys
    assert build_state(filled, now=now, window_s=1)["timeline"]["window_s"] == 30  # at least 30 seconds


# -- what the executor learned (issue 13) ------------------------------------------------------


def _interference_document() -> dict[str, Any]:
    model = InterferenceModel()
    for i in range(12):
        own, co = 0.3 + 0.04 * (i % 6), [0.2 + 0.05 * (i % 5)]
        obs = CollocationObservation.steady(slowdown(own, co, 0.9, 0.8), own, co)
        model = model.observe("NVIDIA A100-SXM4-40GB", obs)
    return model.to_dict()


def test_learned_interference_per_gpu_model(store: Store, now: datetime) -> None:
    assert build_state(store, now=now)["interference"]["models"] == []  # nothing learned yet
    store.put_snapshot("model:interference", now, _interference_document())
    learned = build_state(store, now=now)["interference"]
    (a100,) = learned["models"]
    assert a100["gpu_model"] == "nvidia a100-sxm4-40gb" and a100["learned"] and a100["count"] == 12
    assert a100["beta"] != learned["prior"]["beta"] and 0 < a100["confidence"] <= 1
    assert learned["written_at"] == now.isoformat()


def test_tenants_and_waiting_tasks_carry_their_activity_where_the_snapshot_has_it(store: Store, now: datetime) -> None:
    body = snapshot_body(now)
    tenants = body["gpus"][0]["tenants"]
    tenants[0]["activity"] = 0.42
    tenants[1]["activity"] = 7  # nonsense from another version: not shown
    body["waiting"][0]["activity"] = 0.8
    store.put_snapshot(f"executor:{HOST}", now, body)
    state = build_state(store, now=now)
    assert [t["activity"] for t in state["gpus"][0]["tenants"]] == [0.42, None]
    assert state["gpus"][1]["tenants"][0]["activity"] is None  # an executor from before issue 13
    assert state["waiting"][0]["activity"] == 0.8


def test_a_waiting_try_shows_its_priority_and_place(store: Store, now: datetime) -> None:
    body = snapshot_body(now)
    body["waiting"] = [
        {**body["waiting"][0], "priority": 3, "tie_break": 0},
        {"label": "carma_demo.urgent", "key": "u", "since": now.timestamp(), "priority": 9, "tie_break": 0},
    ]
    store.put_snapshot(f"executor:{HOST}", now, body)
    waiting = {w["label"]: w for w in build_state(store, now=now)["waiting"]}
    assert waiting["carma_demo.urgent"]["place"].startswith("priority 9; first by priority")
    assert waiting["carma_demo.vgg3"]["place"].startswith(
        "priority 3; 1 waiting try of a higher priority goes first: carma_demo.urgent (9)"
    )


def test_a_try_that_grew_past_its_placement_unstopped_is_marked(store: Store, now: datetime) -> None:
    store.upsert_placement(
        placement("grower", 1, TryOutcome.SUCCESS, [0], now - timedelta(seconds=60), ran=30, estimate=8192, peak=30720)
    )
    rows = build_state(store, now=now)["timeline"]["placements"]
    grown = next(p for p in rows if p["task_id"] == "grower")["grown"]
    assert grown is not None and grown.startswith("grew to 30.0 GiB past its declared 8.0 GiB and was not stopped")
