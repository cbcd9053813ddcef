"""The FastAPI app of the GPU page, mounted by the Airflow plugin at ``/carma``.

- ``GET /carma/``: the page (server-rendered HTML, refreshes itself every few seconds);
- ``GET /carma/api/state``: the same data as JSON.

Every route depends on Airflow's own ``requires_access_view(AccessView.CLUSTER_ACTIVITY)``: the
auth manager of the deployment decides.  A request without Airflow's JWT (the UI's ``_token``
cookie or an ``Authorization: Bearer`` header) gets 401, an invalid token 403, a user who may not
see cluster activity 403.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape

from carma_airflow.core.errors import CarmaError
from carma_airflow.store.url import mask_password
from carma_airflow.ui import render
from carma_airflow.ui.state import build_state

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

REFRESH_SECONDS = 3

# Airflow's dependency, built once so that tests of the rendering can override exactly it.
require_viewer = requires_access_view(AccessView.CLUSTER_ACTIVITY)

Minutes = Annotated[float | None, Query(ge=1, le=1440, description="How far back the timeline reaches")]


class StoreHolder:
    """Opens the store on first use (settings read then, not at import) and keeps it open."""

    def __init__(self, open_store: Callable[[], Store] | None = None) -> None:
        self._open = open_store or _store_from_airflow
        self._store: Store | None = None
        self._lock = threading.Lock()

    def get(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = self._open()
            return self._store


def _store_from_airflow() -> Store:
    from carma_airflow.config.settings import CarmaSettings
    from carma_airflow.store.errors import StoreError
    from carma_airflow.store.store import Store

    url = CarmaSettings.from_airflow().store_url
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
        if not path.exists():  # do not create an empty database from the api-server
            raise StoreError(
                f"no CARMA store at {mask_password(url)} yet: no CarmaExecutor has started with this "
                "[carma] store_url (the scheduler creates it); check that the api-server and the "
                "scheduler use the same [carma] store_url"
            )
    return Store(url)


def create_app(open_store: Callable[[], Store] | None = None) -> FastAPI:
    """The page's app.  ``open_store`` (default: the ``[carma] store_url`` of Airflow's config)."""
    app = FastAPI(
        title="CARMA GPUs",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(require_viewer)],
    )
    holder = StoreHolder(open_store)
    env = Environment(
        loader=PackageLoader("carma_airflow.ui", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    render.register(env)
    templates = Jinja2Templates(env=env)

    def state(minutes: float | None) -> tuple[dict[str, Any], int]:
        try:
            store = holder.get()
            return build_state(store, window_s=None if minutes is None else minutes * 60), 200
        except CarmaError as exc:
            return {
                "version": 1,
                "generated_at": datetime.now(timezone.utc).isoformat(),
                "error": mask_password(str(exc)),
            }, 503

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, minutes: Minutes = None) -> Response:
        data, status = state(minutes)
        return templates.TemplateResponse(
            request,
            "page.html",
            {"s": data, "minutes": minutes, "refresh_s": REFRESH_SECONDS},
            status_code=status,
        )

    @app.get("/api/state")
    def api_state(minutes: Minutes = None) -> JSONResponse:
        data, status = state(minutes)
        return JSONResponse(data, status_code=status)

    return app
