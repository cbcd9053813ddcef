"""The page and its JSON endpoint, rendered by the real app from a real store.

Airflow's access check is passed here (``client_for``); it is tested against a real Airflow in
test_airflow_auth.py.
"""

from __future__ import annotations

import html
import os
import re
import secrets
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url
from ui_helpers import HOST, OOM_MESSAGE, WAIT_REASON, client_for, fill_store, snapshot_body

from carma_airflow.core.interference import CollocationObservation, InterferenceModel
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db

PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
PASSWORD = "hunter2-Secret"


def text_of(page: str) -> str:
    """The page's visible text, tags dropped and entities decoded."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_page_shows_gpus_tenants_waiting_timeline_and_ooms(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    text = text_of(r.text)
    for gpu in ("GPU 0", "GPU 1", "GPU 2"):
        assert gpu in text
    assert "32.2 GiB / 40.0 GiB" in text and "82%" in text  # GPU 0's memory and activity
    assert "risk high" in text and "quarantined" in text and "NVML: GPU is lost (Xid 79)" in text
    assert "carma_demo.bert_large" in text and "carma_demo.resnet3" in text  # GPU 0's tenants
    assert WAIT_REASON in text
    assert OOM_MESSAGE in text and "retrying: try 2 runs on GPU 1" in text
    # the timeline: one SVG bar per try per GPU, coloured by outcome
    assert r.text.count('class="bar oom" data-key="carma_demo/maskrcnn/r1/-1/1"') == 1
    assert r.text.count('data-key="carma_demo/ddp_gpt2/r1/-1/1"') == 2  # a 2-GPU try
    assert 'class="bar waiting" data-key="carma_demo/vgg3/r1/-1/1"' in r.text
    assert f"{HOST}: interference-aware policy, simulated GPUs, backfill queue, 3 running, decisions in 0.8 ms" in text
    assert "not running" not in text and "No CarmaExecutor" not in text


def test_json_has_the_same_data(client: TestClient) -> None:
    r = client.get("/api/state")
    assert r.status_code == 200
    data = r.json()
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2]
    assert data["gpus"][1]["tenants"][0]["label"] == "carma_demo.maskrcnn"
    assert data["waiting"][0]["reason"] == WAIT_REASON
    assert data["ooms"][0]["recovery"]["outcome"] == "running"
    assert len(data["timeline"]["placements"]) == 6
    assert client.get("/api/state", params={"minutes": 10}).json()["timeline"]["window_s"] == 600
    assert client.get("/api/state", params={"minutes": 0}).status_code == 422


def test_page_escapes_what_dags_and_errors_write(store: Store, store_url: str, now: datetime) -> None:
    body = snapshot_body(now)
    body["waiting"][0]["reason"] = "<script>alert('x')</script> needs room"
    store.put_snapshot(f"executor:{HOST}", now, body)
    page = client_for(lambda: Store(store_url)).get("/").text
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page


@pytest.mark.parametrize(("held", "words"), [(1, "holds 1 store write it"), (3, "holds 3 store writes it")])
def test_held_store_writes_are_counted_in_words(
    store: Store, store_url: str, now: datetime, held: int, words: str
) -> None:
    body = snapshot_body(now)
    body["pending_store_writes"] = held
    store.put_snapshot(f"executor:{HOST}", now, body)
    assert words in text_of(client_for(lambda: Store(store_url)).get("/").text)


def test_stale_executor_is_said_to_be_not_running(store: Store, store_url: str, now: datetime) -> None:
    fill_store(store, now, snapshot_age_s=300)
    text = text_of(client_for(lambda: Store(store_url)).get("/").text)
    assert f"The executor on {HOST} is not running" in text and re.search(r"5 m [0-9]+ s old", text)
    assert "GPU 0" in text  # its last state is still shown


def test_no_executor_yet(store: Store, store_url: str) -> None:
    text = text_of(client_for(lambda: Store(store_url)).get("/").text)
    assert "No CarmaExecutor has published its state yet" in text
    assert "No placements yet" in text and "No task is waiting" in text


def test_unreachable_store_is_an_error_page_without_the_password() -> None:
    url = f"postgresql+psycopg://carma:{PASSWORD}@127.0.0.1:1/carma"
    client = client_for(lambda: Store(url, busy_timeout_s=2))
    r = client.get("/")
    assert r.status_code == 503
    assert "The GPU state cannot be read" in r.text and "carma:***@127.0.0.1:1/carma" in r.text
    assert PASSWORD not in r.text
    j = client.get("/api/state")
    assert j.status_code == 503 and PASSWORD not in j.text and "***" in j.json()["error"]


def test_missing_sqlite_store_is_not_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The api-server's default store (read from Airflow's config) is not created by the page."""
    monkeypatch.setenv("AIRFLOW__CARMA__STORE_URL", f"sqlite:///{tmp_path / 'nowhere.db'}")
    monkeypatch.setenv("AIRFLOW__CARMA__GPU_BACKEND", "simulated")
    from carma_airflow.ui.app import create_app, require_viewer

    app = create_app()
    app.dependency_overrides[require_viewer] = lambda: None
    r = TestClient(app).get("/api/state")
    assert r.status_code == 503 and "no CARMA store at" in r.json()["error"]
    assert not (tmp_path / "nowhere.db").exists()


@pytest.fixture
def pg_url_with_password() -> Iterator[str]:
    """A fresh PostgreSQL database, reached through a URL that carries a password."""
    name = f"carma_ui_{secrets.token_hex(5)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {make_url(PG_ADMIN_URL).host} is not reachable: {exc}", pytrace=False)
    try:
        yield make_url(PG_ADMIN_URL).set(database=name, password=PASSWORD).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.mark.postgres
def test_store_url_password_never_shown(pg_url_with_password: str, now: datetime) -> None:
    store = Store(pg_url_with_password)
    store.migrate()
    fill_store(store, now - timedelta(seconds=1))
    store.close()
    client = client_for(lambda: Store(pg_url_with_password))
    page = client.get("/")
    data = client.get("/api/state")
    assert page.status_code == data.status_code == 200
    assert "GPU 0" in page.text and data.json()["gpus"][0]["index"] == 0  # the data did come from that store
    assert PASSWORD not in page.text and PASSWORD not in data.text
    assert ":***@" in text_of(page.text) and ":***@" in data.json()["store"]


def test_page_shows_the_learned_interference_and_tenant_activity(store: Store, store_url: str, now: datetime) -> None:
    client = client_for(lambda: Store(store_url))
    nothing = "Nothing learned yet: every GPU model uses the prior (beta 0.10, activity scale k 1.00)"
    assert nothing in text_of(client.get("/").text)
    model = InterferenceModel()
    for i in range(12):
        model = model.observe("A100-SXM4-40GB", CollocationObservation.steady(1.3 + 0.02 * i, 0.5, [0.3 + 0.02 * i]))
    model = model.observe("<script>alert(1)</script>", CollocationObservation.steady(1.2, 0.5, [0.4]))
    store.put_snapshot("model:interference", now, model.to_dict())
    body = snapshot_body(now)
    body["gpus"][0]["tenants"][0]["activity"] = 0.42
    store.put_snapshot(f"executor:{HOST}", now, body)
    page = client.get("/").text
    text = text_of(page)
    assert "Learned interference" in text and "Nothing learned yet" not in text
    assert 'id="interference"' in page and "a100-sxm4-40gb" in text and "learned" in text
    assert "prior 0.10" in text and "prior 1.00" in text and "10 needed" in text  # the one-observation model
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page  # a model name is escaped too
    assert "act 0.42" in text  # bert_large's learned activity beside its reservation
    models = {m["gpu_model"]: m["learned"] for m in client.get("/api/state").json()["interference"]["models"]}
    assert models == {"<script>alert(1)</script>": False, "a100-sxm4-40gb": True}  # JSON: the names as they are
