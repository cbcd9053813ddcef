"""The GPU page inside Airflow: live GPUs, tenants, waiting tasks, a placement timeline, OOMs.

:data:`app` is what the plugin mounts at ``/carma``.  It builds the FastAPI app on its first
request, so that the plugin, which task processes load too (for the listener), does not import
FastAPI, Jinja2 and Airflow's API security module in every task.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

URL_PREFIX = "/carma"


class LazyApp:
    """An ASGI app that creates the real one (``carma_airflow.ui.app.create_app()``) when first called."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None
        self._lock = threading.Lock()

    def _get(self) -> ASGIApp:
        with self._lock:
            if self._app is None:
                from carma_airflow.ui.app import create_app

                self._app = create_app()
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._get()(scope, receive, send)


app = LazyApp()
