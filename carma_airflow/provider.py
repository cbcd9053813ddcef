"""Provider info: how Airflow discovers carma-airflow (config section, executor, plugin)."""

from __future__ import annotations

from typing import Any

from carma_airflow import __version__
from carma_airflow.config.options import provider_config_section


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "carma-airflow",
        "name": "CARMA",
        "description": "Collocation-aware GPU placement for Airflow (CarmaExecutor).",
        "versions": [__version__],
        "config": provider_config_section(),
        "executors": ["carma_airflow.executor.CarmaExecutor"],
        "cli": ["carma_airflow.executor.airflow.cli.carma_cli_commands"],
    }
