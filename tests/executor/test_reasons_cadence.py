"""Why each try waits is decided at every pass for a short queue, once a second for a deep one
(executor/bookkeeping/liveview.py); placements do not depend on it (tests/core/test_deep_queue_paths.py)."""

from __future__ import annotations

from executor_helpers import make_workload, run_until, submit

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.executor.bookkeeping.liveview import REASONS_ALWAYS_BELOW, REASONS_EVERY_S, LiveView


def _live(tmp_path) -> LiveView:  # type: ignore[no-untyped-def]
    settings = CarmaSettings.load({"gpu_backend": "simulated"}.get, str(tmp_path))
    return LiveView(settings, "interference-aware", "backfill", "test-host:1:ab")


def test_a_short_queue_gets_reasons_at_every_pass(tmp_path) -> None:  # type: ignore[no-untyped-def]
    live = _live(tmp_path)
    assert all(live.reasons_due(100.0 + i * 0.01, REASONS_ALWAYS_BELOW) for i in range(5))


def test_a_deep_queue_gets_reasons_once_a_second(tmp_path) -> None:  # type: ignore[no-untyped-def]
    live = _live(tmp_path)
    deep = REASONS_ALWAYS_BELOW + 1
    assert live.reasons_due(100.0, deep)  # the first pass
    assert not live.reasons_due(100.0 + REASONS_EVERY_S / 2, deep)
    assert live.reasons_due(100.0 + REASONS_EVERY_S, deep)


def test_a_deep_queue_still_places_and_explains(executor_factory) -> None:  # type: ignore[no-untyped-def]
    n = REASONS_ALWAYS_BELOW + 16
    names = [f"t{i:03d}" for i in range(n)]
    ex = executor_factory(
        gpus="2xA100-40GB",
        parallelism=n + 8,
        behaviour={name: {"seconds": 0.05} for name in names},
        max_tenants="2",
        lock_seconds="0.05",
    )
    submit(ex, *[make_workload(name, config={"memory": "1GiB"}) for name in names])
    waiting = list(ex.waiting.values())
    assert len(waiting) > REASONS_ALWAYS_BELOW  # a deep queue: the first pass explains every try
    assert all(t.last_summary for t in waiting)
    run_until(ex, lambda: not ex.waiting and not ex.active, timeout=120)
    outcomes = {ex.store.latest_for("dag", name)[0].outcome.value for name in names}
    assert outcomes == {"success"}
