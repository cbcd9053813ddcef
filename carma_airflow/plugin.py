"""Airflow plugin: the task-process listener and the GPU page (``/carma/``, "GPUs" in the navigation)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from carma_airflow import ui
from carma_airflow.taskrun import listener

# A small GPU chip, inline so the navigation needs no extra request.
ICON = (
    "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' "
    "stroke='%23718096' stroke-width='2' stroke-linecap='round'><rect x='5' y='5' width='14' height='14' rx='2'/>"
    "<rect x='9' y='9' width='6' height='6'/><path d='M9 2v3M15 2v3M9 19v3M15 19v3M2 9h3M2 15h3M19 9h3M19 15h3'/></svg>"
)


class CarmaPlugin(AirflowPlugin):
    name = "carma"
    # AirflowPlugin declares these as class attributes.
    listeners = [listener]  # noqa: RUF012
    fastapi_apps = [{"app": ui.app, "url_prefix": ui.URL_PREFIX, "name": "CARMA GPUs"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "GPUs",
            "href": f"{ui.URL_PREFIX}/",
            "url_route": "carma",
            "destination": "nav",
            "nav_top_level": True,
            "icon": ICON,
        }
    ]
