"""carma_airflow modules the kit needs that live in the Airflow-facing package, loaded without Airflow.

``carma_airflow/executor/__init__.py`` imports the executor and with it Airflow, so a plain
``import carma_airflow.executor.outcome`` needs Airflow installed (the GPU machines may not have
it) and costs seconds in every task process.  :mod:`outcome` and :mod:`view` themselves import
only the core and the monitor: load them from their files under their own names.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import carma_airflow


def _load(name: str) -> ModuleType:
    full = f"carma_airflow.executor.{name}"
    loaded = sys.modules.get(full)
    if loaded is not None:
        return loaded
    path = Path(carma_airflow.__file__).parent / "executor" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(full, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {full} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)
    return module


outcome = _load("outcome")
view = _load("view")

RESULT_ENV: str = outcome.RESULT_ENV
TryResult = outcome.TryResult
read_result = outcome.read_result
write_result = outcome.write_result
build_view = view.build_view

# Environment CarmaExecutor gives every GPU task (carma_airflow/executor/executor.py, GUARDS and
# _launch); kept equal to it by tests/gpu/test_dry_run.py when Airflow is importable.
GUARDS: dict[str, str] = {
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
