"""Migrations: create the schema, are idempotent, match the models, stay clear of Airflow's tables."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, String, create_engine, inspect, text
from store_helpers import placement

from carma_airflow.store import Store
from carma_airflow.store.errors import RecordError
from carma_airflow.store.schema import VERSION_TABLE, include_name, metadata
from carma_airflow.store.store import MIGRATIONS_DIR

HEAD = Store("sqlite://").head_revision()

pytestmark = pytest.mark.db

TABLES = {"carma_gpu_sample", "carma_placement", "carma_oom_event", "carma_memory_history", "carma_activity_history"}


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _downgrade(url: str, revision: str) -> None:
    """``alembic downgrade revision`` on the store's migrations (the store itself only upgrades)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    engine = create_engine(url)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
    engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    """The column names ``table`` has now."""
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def _diff(url: str, target: MetaData) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_name": include_name, "compare_type": True, "version_table": VERSION_TABLE}
            )
            return list(compare_metadata(context, target))
    finally:
        engine.dispose()


def test_migrate_creates_the_tables_on_an_empty_database(db_url: str) -> None:
    assert not _tables(db_url) & TABLES
    store = Store(db_url)
    assert store.revision() is None
    store.migrate()
    assert _tables(db_url) >= TABLES | {VERSION_TABLE}
    assert store.revision() == store.head_revision() == HEAD
    store.close()


def test_migrate_twice_is_a_no_op(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    store.upsert_placement(placement("kept"))
    store.migrate()
    assert store.revision() == HEAD
    assert [p.key for p in store.placements()] == ["kept"]
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() == [HEAD]
    engine.dispose()
    store.close()


def test_upgrade_from_0001_keeps_rows_and_adds_process_columns(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0001")  # a database left by the first release
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_placement (key, dag_id, task_id, run_id, map_index, try_number, label, decided_at,"
                " outcome, gpu_uuids, summary, reasons, policy) VALUES ('old', 'd', 't', 'r', -1, 1, 'd.t',"
                " '2026-01-01 00:00:00+00:00', 'running', '[]', 's', '[]', 'p')"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD
    old = store.placement("old")
    assert old is not None and old.pid is None and old.outcome == "running"
    assert store.mark_launched("old", 4242, 99)
    again = store.placement("old")
    assert again is not None and (again.pid, again.pid_start) == (4242, 99)
    store.close()


def test_upgrade_from_0003_keeps_learned_peaks_for_the_whole_task(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0003")  # a database whose memory history has no map index
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_memory_history (dag_id, task_id, peak_mib, at, run_id)"
                " VALUES ('d', 't', 6000, '2026-01-01 00:00:00+00:00', 'r1')"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD
    assert store.peaks("d", "t") == [6000]  # the old peak still counts for the task
    assert store.peaks("d", "t", map_index=0) == []  # but for no instance in particular
    store.add_peak("d", "t", 9000, 1_900_000_000.0, "r2", 0)
    assert store.peaks("d", "t", map_index=0) == [9000]
    assert store.peaks("d", "t") == [6000, 9000]
    store.close()


def test_upgrade_from_0004_adds_the_activity_history_and_keeps_the_rest(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0004")  # a database from before learned activity
    assert "carma_activity_history" not in _tables(db_url)
    store.add_peak("d", "t", 6000, 1_900_000_000.0, "r1", -1)
    store.put_snapshot("executor:h", 1_900_000_000.0, {"version": 1})
    store.migrate()
    assert store.revision() == HEAD
    assert store.peaks("d", "t") == [6000] and list(store.snapshots("executor:")) == ["executor:h"]
    assert store.activities("d", "t") == []
    store.add_activity("d", "t", 0.42, "process", 1_900_000_001.0, "r2", -1)
    assert store.activities("d", "t") == [(0.42, "process")]
    store.close()


def test_downgrade_from_0005_to_0004_drops_only_the_activity_history(store: Store, any_url: str) -> None:
    store.add_activity("d", "t", 0.5, "hint", 1_900_000_000.0)
    store.add_peak("d", "t", 6000, 1_900_000_000.0)
    _downgrade(any_url, "0004")
    assert "carma_activity_history" not in _tables(any_url)
    assert store.revision() == "0004" and store.peaks("d", "t") == [6000]
    store.migrate()
    assert store.activities("d", "t") == []


def test_downgrade_from_0006_to_0005_drops_only_the_peer_tables(store: Store, any_url: str) -> None:
    store.add_peak("d", "t", 6000, 1_900_000_000.0)
    _downgrade(any_url, "0005")
    assert not {"carma_executor", "carma_reservation"} & set(_tables(any_url))
    assert store.revision() == "0005" and store.peaks("d", "t") == [6000]
    store.migrate()
    assert store.executors() == [] and store.revision() == HEAD


def test_upgrade_from_0006_keeps_learned_activities_without_co_tenant_types(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0006")  # a database from before co-tenant types were recorded
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_activity_history (dag_id, task_id, map_index, sm_activity, source, at, run_id)"
                " VALUES ('d', 't', -1, 0.42, 'process', '2026-01-01 00:00:00+00:00', 'r1')"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD and HEAD >= "0007"
    store.add_activity("d", "t", 0.5, "process", 1_900_000_001.0, "r2", -1, co_tasks=["d.u"])
    got = [(r.sm_activity, r.run_id, r.co_tasks) for r in store.activity_records("d", "t")]
    assert got == [(0.42, "r1", None), (0.5, "r2", ("d.u",))]
    store.close()


def test_downgrade_from_0007_to_0006_drops_only_the_co_tenant_types(store: Store, any_url: str) -> None:
    store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=["d.u"])
    _downgrade(any_url, "0006")
    columns = _columns(any_url, "carma_activity_history")
    assert "co_tasks" not in columns and store.revision() == "0006"
    assert store.activities("d", "t") == [(0.5, "process")]  # the row itself stays
    store.migrate()
    assert [r.co_tasks for r in store.activity_records("d", "t")] == [None]


def test_upgrade_to_0008_keeps_reservations_and_tries_without_a_fence(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0007")  # a database whose writers did not publish a try's fence
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_reservation (key, owner, label, gpu_uuids, mib, since, exclusive)"
                " VALUES ('k', 'peer', 'd.t', '[\"GPU-0\"]', 16384, 1900000000.0, false)"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD and HEAD >= "0008"
    (old,) = store.shared_reservations()
    assert (old.key, old.mib, old.fence) == ("k", 16384, None)  # not published: the reader's host's fence
    store.close()


def test_downgrade_from_0008_to_0007_drops_only_the_published_fences(store: Store, any_url: str) -> None:
    rec = placement("k8", fence={"kept_margin_mib": 2048})
    store.upsert_placement(rec)
    kept = store.placement(rec.key)
    assert kept is not None and kept.fence == {"kept_margin_mib": 2048}
    _downgrade(any_url, "0007")
    engine = create_engine(any_url)
    try:
        tables = ("carma_placement", "carma_reservation")
        columns = {t: {c["name"] for c in inspect(engine).get_columns(t)} for t in tables}
    finally:
        engine.dispose()
    assert not any("fence" in c for c in columns.values()) and store.revision() == "0007"
    store.migrate()
    got = store.placement(rec.key)
    assert got is not None and (got.dag_id, got.fence) == ("train", None)  # the try stays, its fence unknown


def test_upgrade_to_0009_keeps_learned_activities_without_solo_run_times(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0008")  # a database whose executors learned run times again after each restart
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_activity_history (dag_id, task_id, map_index, sm_activity, source, at, run_id,"
                " co_tasks) VALUES ('d', 't', -1, 0.42, 'process', '2026-01-01 00:00:00+00:00', 'r1', '[]')"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD
    store.add_activity("d", "t", 0.5, "process", 1_900_000_001.0, "r2", -1, co_tasks=[], solo_s=612.5)
    store.add_activity("d", "u", 0.3, "process", 1_900_000_002.0, "r2", -1, co_tasks=["d.t"])  # shared
    assert store.recent_solo_runs() == [("d", "t", 612.5)]  # the old row's is not known, not 0
    assert [a for _, _, a, _ in store.recent_activities()] == [0.42, 0.5, 0.3]
    store.close()


def test_downgrade_from_0009_to_0008_drops_only_the_solo_run_times(store: Store, any_url: str) -> None:
    store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[], solo_s=30.0)
    _downgrade(any_url, "0008")
    columns = _columns(any_url, "carma_activity_history")
    assert "solo_s" not in columns and "co_tasks" in columns and store.revision() == "0008"
    store.migrate()
    assert store.activities("d", "t") == [(0.5, "process")] and store.recent_solo_runs() == []


def test_migrations_match_the_models(store: Store, any_url: str) -> None:
    assert _diff(any_url, metadata) == []


def test_model_comparison_would_see_a_difference(store: Store, any_url: str) -> None:
    # Guard against a vacuous check above: a changed copy of the models does show up.
    changed = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["carma_placement"].append_column(Column("extra", Integer, nullable=True))
    changed.tables["carma_placement"].c.policy.type = String(32)
    kinds = {diff[0][0] if isinstance(diff, list) else diff[0] for diff in _diff(any_url, changed)}  # type: ignore[index]
    assert {"add_column", "modify_type"} <= kinds


def test_version_table_does_not_touch_airflows_alembic_version(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('airflow-head')"))
    store = Store(db_url)
    store.migrate()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == ["airflow-head"]
    engine.dispose()
    assert store.revision() == HEAD
    store.close()


def test_downgrade_to_base_removes_the_tables(store: Store, any_url: str) -> None:
    assert _tables(any_url) >= TABLES
    _downgrade(any_url, "base")
    assert not _tables(any_url) & TABLES
    store.migrate()
    assert _tables(any_url) >= TABLES


def test_upgrade_to_0010_keeps_solo_run_times_without_their_gpu_model(db_url: str) -> None:
    store = Store(db_url)
    store.migrate("0009")  # solo run times kept per task only
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO carma_activity_history (dag_id, task_id, map_index, sm_activity, source, at, run_id,"
                " co_tasks, solo_s) VALUES ('d', 't', -1, 0.5, 'process', '2026-01-01 00:00:00+00:00', 'r1', '[]', 600)"
            )
        )
    engine.dispose()
    store.migrate()
    assert store.revision() == HEAD
    store.add_activity(
        "d", "t", 0.5, "process", 1_900_000_001.0, "r2", -1, co_tasks=[], solo_s=200.0, gpu_model="H100-80GB"
    )
    store.add_activity("d", "u", 0.3, "process", 1_900_000_002.0, "r2", -1, co_tasks=["d.t"], gpu_model="T4")  # shared
    assert store.recent_solo_runs() == [("d", "t", 600.0), ("d", "t", 200.0)]
    assert store.recent_solo_runs_by_model() == [("d", "t", "H100-80GB", 200.0)]  # the old row's model is unknown
    store.close()
    again = Store(db_url)  # a restart reads the same
    assert again.recent_solo_runs_by_model() == [("d", "t", "H100-80GB", 200.0)]
    again.close()


def test_downgrade_from_0010_to_0009_drops_only_the_gpu_model(store: Store, any_url: str) -> None:
    store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[], solo_s=30.0, gpu_model="L4")
    _downgrade(any_url, "0009")
    columns = _columns(any_url, "carma_activity_history")
    assert "gpu_model" not in columns and "solo_s" in columns and store.revision() == "0009"
    store.migrate()
    assert store.recent_solo_runs() == [("d", "t", 30.0)] and store.recent_solo_runs_by_model() == []


def test_upgrade_to_0011_keeps_placements_without_a_retry_plan(store: Store, any_url: str) -> None:
    from carma_airflow.core.recovery import EndPlan, plan_try_end

    store.upsert_placement(placement("old"))
    _downgrade(any_url, "0010")  # the row as an older executor left it
    store.migrate()
    assert store.revision() == HEAD
    old = store.placement("old")
    assert old is not None and old.end_plan is None and old.estimate_mib == 12288
    plan = plan_try_end(2, None, author_retries=1, oom_retries=2, prior_ooms=1)
    store.upsert_placement(placement("new", end_plan=plan.as_json()))
    again = Store(any_url)  # a restarted executor reads the plan the try was launched with
    new = again.placement("new")
    assert new is not None and EndPlan.from_json(new.end_plan) == plan
    again.close()


def test_downgrade_from_0011_to_0010_drops_only_the_retry_plan(store: Store, any_url: str) -> None:
    from carma_airflow.core.recovery import plan_try_end

    store.upsert_placement(placement("k", end_plan=plan_try_end(1, None, 0, 2, 0).as_json()))
    _downgrade(any_url, "0010")
    columns = _columns(any_url, "carma_placement")
    assert "end_plan" not in columns and "fence" in columns and store.revision() == "0010"
    store.migrate()
    kept = store.placement("k")
    assert kept is not None and kept.end_plan is None and kept.estimate_mib == 12288


def test_upgrade_to_0012_keeps_activities_and_reads_back_shared_run_times(store: Store, any_url: str) -> None:
    store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[], solo_s=30.0, gpu_model="L4")
    _downgrade(any_url, "0011")  # the rows as an older executor left them
    store.migrate()
    assert store.revision() == HEAD
    assert store.recent_shared_runs() == []
    store.add_activity(
        "d", "u", 0.3, "process", 1_900_000_001.0, co_tasks=["d.t"], shared_s=420.0, gpu_model="A100-40GB"
    )
    again = Store(any_url)  # a restarted executor reads the bound back, with its GPU model
    assert again.recent_shared_runs() == [("d", "u", "A100-40GB", 420.0, None)]
    assert again.recent_solo_runs() == [("d", "t", 30.0)]  # a shared run time is no solo one
    again.close()
    with pytest.raises(RecordError, match="not both"):
        store.add_activity("d", "u", 0.3, "process", 1_900_000_002.0, co_tasks=[], solo_s=1.0, shared_s=2.0)
    with pytest.raises(RecordError, match="shared run time"):
        store.add_activity("d", "u", 0.3, "process", 1_900_000_002.0, co_tasks=["d.t"], shared_s=-5.0)


def test_downgrade_from_0012_to_0011_drops_only_the_shared_run_time(store: Store, any_url: str) -> None:
    store.add_activity("d", "u", 0.3, "process", 1_900_000_000.0, co_tasks=["d.t"], shared_s=420.0, gpu_model="L4")
    _downgrade(any_url, "0011")
    columns = _columns(any_url, "carma_activity_history")
    assert "shared_s" not in columns and "gpu_model" in columns and store.revision() == "0011"
    store.migrate()
    assert store.recent_shared_runs() == [] and store.recent_activity_samples()


def test_upgrade_to_0013_reads_back_a_shared_runs_estimate_alone(store: Store, any_url: str) -> None:
    store.add_activity("d", "u", 0.3, "process", 1_900_000_000.0, co_tasks=["d.t"], shared_s=420.0, gpu_model="L4")
    _downgrade(any_url, "0012")  # the row as an older executor left it: a bound, no estimate
    store.migrate()
    assert store.revision() == HEAD == "0013"
    assert store.recent_shared_runs() == [("d", "u", "L4", 420.0, None)]
    store.add_activity(
        "d", "v", 0.3, "process", 1_900_000_001.0, co_tasks=["d.t"], shared_s=300.0, shared_alone_s=200.0
    )
    again = Store(any_url)  # a restarted executor reads the estimate back with its bound
    assert again.recent_shared_runs()[-1] == ("d", "v", None, 300.0, 200.0)
    again.close()
    for bad, shared in ((400.0, 300.0), (-1.0, 300.0), (100.0, None)):  # above its bound, negative, no bound
        with pytest.raises(RecordError, match="estimated run alone"):
            store.add_activity(
                "d", "v", 0.3, "process", 1_900_000_002.0, co_tasks=["d.t"], shared_s=shared, shared_alone_s=bad
            )


def test_downgrade_from_0013_to_0012_drops_only_the_estimate(store: Store, any_url: str) -> None:
    store.add_activity(
        "d", "u", 0.3, "process", 1_900_000_000.0, co_tasks=["d.t"], shared_s=420.0, shared_alone_s=300.0
    )
    _downgrade(any_url, "0012")
    columns = _columns(any_url, "carma_activity_history")
    assert "shared_alone_s" not in columns and "shared_s" in columns and store.revision() == "0012"
    store.migrate()
    assert store.recent_shared_runs() == [("d", "u", None, 420.0, None)]
