"""The plugin's parts for the page: a FastAPI app at /carma and a "GPUs" navigation entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from carma_airflow import ui
from carma_airflow.plugin import CarmaPlugin
from carma_airflow.ui.app import require_viewer


def test_plugin_mounts_the_page_and_adds_a_navigation_entry() -> None:
    (app,) = CarmaPlugin.fastapi_apps
    assert app["url_prefix"] == "/carma" and app["app"] is ui.app
    (view,) = CarmaPlugin.external_views
    assert view["href"] == app["url_prefix"] + "/"
    assert (view["url_route"], view["destination"], view["name"]) == ("carma", "nav", "GPUs")
    assert view["icon"].startswith("data:image/svg+xml")
    from carma_airflow.taskrun import listener

    assert CarmaPlugin.listeners == [listener]


def test_loading_the_plugin_does_not_import_fastapi() -> None:
    """Task processes load the plugin (for its listener): the page's web stack stays out of them."""
    heavy = ("fastapi", "starlette", "carma_airflow.ui.app")
    code = f"import sys, carma_airflow.plugin; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_lazy_app_builds_the_page_app_once_mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CARMA__STORE_URL", f"sqlite:///{tmp_path / 'absent.db'}")
    lazy = ui.LazyApp()
    parent = FastAPI()
    parent.mount("/carma", lazy)
    client = TestClient(parent)
    built = lazy._get()
    assert isinstance(built, FastAPI) and lazy._get() is built
    built.dependency_overrides[require_viewer] = lambda: None
    r = client.get("/carma/api/state")
    assert r.status_code == 503 and "no CARMA store at" in r.json()["error"]
