"""The reservation ledger: reserve/release, the lock window, observation, exclusive, the view."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from helpers import A100, CALM, busy_gpu, idle_gpu

from carma_airflow.core import DuplicateKeyError, GpuHealth, GpuState, Placer, Reservations
from carma_airflow.core.policies import make_policy


def test_reserve_books_every_gpu_and_release_frees_them_but_keeps_the_last_placement() -> None:
    book = Reservations(seen_after_s=30.0)
    held = book.reserve("a#1", "a", ["GPU-0", "GPU-1"], 6000, 5.0)
    assert held.gpu_uuids == ("GPU-0", "GPU-1")
    for uuid in ("GPU-0", "GPU-1"):
        (tenant,) = book.tenants_on(uuid, 6.0)
        assert (tenant.key, tenant.reserved_mib, tenant.placed_at) == ("a#1", 6000, 5.0)
        assert book.last_placed_at(uuid) == 5.0
    assert "a#1" in book and len(book) == 1

    assert book.release("a#1") == held
    assert book.tenants_on("GPU-0", 6.0) == () and book.tenants_on("GPU-1", 6.0) == ()
    assert book.last_placed_at("GPU-0") == 5.0  # the lock window is about placing, not holding
    assert book.release("a#1") is None  # a second release (the try ended twice) is harmless
    assert len(book) == 0


def test_a_key_holds_one_reservation() -> None:
    book = Reservations()
    book.reserve("a#1", "a", ["GPU-0"], 1000, 0.0)
    with pytest.raises(DuplicateKeyError, match="already holds GPUs GPU-0; release it"):
        book.reserve("a#1", "a", ["GPU-1"], 1000, 1.0)
    assert book.on("GPU-1") == ()


def test_inside_the_lock_window_a_tenant_is_unseen_after_it_is_counted_as_held() -> None:
    book = Reservations(seen_after_s=30.0)
    book.reserve("a#1", "a", ["GPU-0"], 8000, 100.0)
    assert book.tenants_on("GPU-0", 129.9)[0].observed_mib is None
    assert book.tenants_on("GPU-0", 130.0)[0].observed_mib == 8000


def test_without_seen_after_only_an_observation_makes_a_tenant_seen() -> None:
    book = Reservations(seen_after_s=None)
    book.reserve("a#1", "a", ["GPU-0", "GPU-1"], 8000, 0.0)
    assert book.tenants_on("GPU-0", 1e9)[0].observed_mib is None
    assert book.observe("a#1", 9500)
    assert [t.observed_mib for u in ("GPU-0", "GPU-1") for t in book.tenants_on(u, 1.0)] == [9500, 9500]
    assert not book.observe("gone#1", 100)  # ended before its reading arrived


def test_the_placer_counts_an_unseen_tenant_in_full_and_with_the_activity_prior() -> None:
    # the monitor still reads the GPU as empty: only the ledger knows a try was placed on it
    placer = Placer(make_policy("interference-aware"))
    book = Reservations(seen_after_s=placer.settings.lock_s)
    observed = idle_gpu(0, window=CALM)
    book.reserve("a#1", "a", ["GPU-0"], 20000, 0.0)

    fresh = placer.facts(book.view(10.0, [observed]))[0]
    assert fresh.usable_free_mib == A100.memory_mib - 20000 - placer.settings.reserve_mib
    assert fresh.smact == pytest.approx(CALM.smact_score + placer.settings.activity_prior)
    assert not fresh.idle

    settled = placer.facts(book.view(31.0, [observed]))[0]
    assert settled.smact == pytest.approx(CALM.smact_score)  # seen: the window shows its activity


def test_an_exclusive_reservation_marks_its_gpu() -> None:
    placer = Placer(make_policy("interference-aware"))
    book = Reservations(seen_after_s=30.0)
    book.reserve("x#1", "x", ["GPU-0"], 4000, 0.0, exclusive=True)
    book.reserve("y#1", "y", ["GPU-1"], 4000, 0.0)
    facts = placer.facts(book.view(1.0, [idle_gpu(0), idle_gpu(1)]))
    assert [f.exclusive_tenant for f in facts] == [True, False]


def test_the_view_replaces_the_states_tenants_with_the_ledgers() -> None:
    book = Reservations(seen_after_s=30.0)
    book.reserve("mine#1", "mine", ["GPU-0"], 3000, 0.0)
    (state,) = book.view(1.0, [busy_gpu(0, free=10000, tenants=2, last_placed_at=-50.0)]).gpus
    assert [t.key for t in state.tenants] == ["mine#1"]
    assert state.last_placed_at == 0.0
    assert state.free_mib == 10000  # the reading itself is the monitor's


def test_the_view_reuses_a_merged_state_only_while_nothing_it_shows_changed() -> None:
    book = Reservations(seen_after_s=30.0)
    observed = idle_gpu(0)
    untouched = idle_gpu(1)
    book.reserve("a#1", "a", ["GPU-0"], 5000, 0.0)

    first = book.view(10.0, [observed, untouched]).gpus
    again = book.view(20.0, [observed, untouched]).gpus
    assert again[0] is first[0]  # same reading, same tenants, still inside the window
    assert again[1] is untouched  # no tenants, never placed on: the monitor's state as it is

    later = book.view(30.0, [observed, untouched]).gpus  # the lock window ended
    assert later[0] is not first[0] and later[0].tenants[0].observed_mib == 5000

    book.reserve("b#1", "b", ["GPU-0"], 1000, 30.0)
    assert [t.key for t in book.view(30.0, [observed]).gpus[0].tenants] == ["a#1", "b#1"]
    book.release("a#1")
    assert [t.key for t in book.view(30.0, [observed]).gpus[0].tenants] == ["b#1"]

    newer = idle_gpu(0, used=200)  # a new reading is merged afresh
    assert book.view(30.0, [newer]).gpus[0].used_mib == 200


def test_tenants_read_in_placement_order() -> None:
    book = Reservations()
    for k in ("c", "a", "b"):
        book.reserve(f"{k}#1", k, ["GPU-0"], 100, 0.0)
    book.release("a#1")
    book.reserve("a#2", "a", ["GPU-0"], 100, 1.0)
    assert [r.label for r in book.on("GPU-0")] == ["c", "b", "a"]
    assert [r.key for r in book] == ["c#1", "b#1", "a#2"]


def test_the_merged_state_carries_every_other_field_of_the_monitors() -> None:
    observed = GpuState(
        uuid="GPU-7",
        index=7,
        spec=A100,
        free_mib=1234,
        used_mib=4321,
        window=CALM,
        tenants=(),
        health=GpuHealth.STALE,
        host="node-9",
        last_placed_at=None,
    )
    assert {f.name for f in fields(GpuState)} == {
        "uuid", "index", "spec", "free_mib", "used_mib", "window", "tenants", "health", "host", "last_placed_at"
    }, "a new GpuState field: carry it over in reservations._with"  # fmt: skip
    book = Reservations()
    book.reserve("a#1", "a", ["GPU-7"], 100, 3.0)
    (merged,) = book.view(4.0, [observed]).gpus
    assert merged == replace(observed, tenants=book.tenants_on("GPU-7", 4.0), last_placed_at=3.0)


def test_the_view_redoes_a_gpu_whose_tenants_changed_even_when_its_reading_did_not() -> None:
    book = Reservations(seen_after_s=None)
    readings = [idle_gpu(0), idle_gpu(1), idle_gpu(2)]
    assert all(st.tenants == () for st in book.view(0.0, readings).gpus)

    book.reserve("a#1", "a", ["GPU-1"], 1000, 1.0)
    got = book.view(1.0, readings).gpus
    assert [[t.key for t in st.tenants] for st in got] == [[], ["a#1"], []]
    assert got[0] is readings[0] and got[2] is readings[2]

    book.observe("a#1", 900)
    assert book.view(2.0, readings).gpus[1].tenants[0].observed_mib == 900

    shuffled = [readings[2], readings[1], readings[0]]  # same objects, other places
    book.release("a#1")
    book.reserve("b#1", "b", ["GPU-0"], 1000, 3.0)
    got = book.view(3.0, shuffled).gpus
    assert [(st.uuid, [t.key for t in st.tenants]) for st in got] == [
        ("GPU-2", []),
        ("GPU-1", []),
        ("GPU-0", ["b#1"]),
    ]
    assert got[1].last_placed_at == 1.0 and got[2].last_placed_at == 3.0
