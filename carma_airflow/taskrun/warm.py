"""What a try's task process imports, loaded once in the launcher so that every fork starts warm.

A try's task runner (the supervisor's child) parses its DAG file, builds the operator, loads the
listener plugins and runs our retry policy.  LocalExecutor's workers are forked from the
scheduler and so start with all of that imported; a child of our launcher starts with what the
launcher imported, and imported the rest itself: about 165 modules, 0.18 s of CPU per try
(measured on a trivial ``@task``: 0.23 s of CPU in the task runner against LocalExecutor's 0.05 s),
which on a 2-core machine halved the rate at which short tries finish (bench/dispatch.py).

Only imports: nothing here opens a connection, starts a thread or reads the DAG folder, so the
launcher stays single-threaded and its fork safe.  A module missing from this installation (an
optional provider) is skipped: the try then imports what it needs itself, as before.

Never a GPU framework (:data:`FRAMEWORKS`): one imported in the launcher would be imported in
every try before its cap hook is installed (taskrun/framework_hook.py), and its CUDA state
forked.  :func:`preload` refuses to import one, and says so if a module it imported pulled one in.
"""

from __future__ import annotations

import importlib
import sys

# Modules the task runner imports for a plain ``@task`` on Airflow 3.3, found by comparing
# ``sys.modules`` inside a try started by the launcher with the launcher's own.
TASK_RUNNER_MODULES = (
    "airflow.dag_processing.dagbag",
    "airflow.dag_processing.importers.python_importer",
    "airflow.dag_processing.bundles.local",
    "airflow.serialization.serialized_objects",
    "airflow.models.dag",
    "airflow.models.dagrun",
    "airflow.models.taskinstancehistory",
    "airflow.models.backfill",
    "airflow.sdk.definitions.decorators",
    "airflow.sdk.bases.decorator",
    "airflow.sdk.bases.branch",
    "airflow.sdk.bases.hook",
    "airflow.sdk.definitions.connection",
    "airflow.triggers.temporal",
    "airflow.triggers.file",
    "airflow.triggers.external_task",
    "airflow.ti_deps.deps.trigger_rule_dep",
    "airflow.timetables.interval",
    "airflow.timetables.simple",
    "airflow.providers.standard.decorators.python",
    "airflow.providers.standard.operators.python",
    "airflow.providers.common.compat.sdk",
    "airflow.version",
    "setproctitle",
    "tabulate",
    "packaging.requirements",
    "carma_airflow.plugin",
    "carma_airflow.taskrun.listener",
    "carma_airflow.taskrun.retry",
    "carma_airflow.dagparse.cluster_policy",
)


# GPU frameworks and the libraries that import them: never imported in the launcher
FRAMEWORKS = ("torch", "tensorflow", "jax", "transformers")


def preload(modules: tuple[str, ...] = TASK_RUNNER_MODULES) -> list[str]:
    """Import ``modules`` and fill the caches every try's supervisor fills; return the modules
    this installation does not have (and "ssl-context" if that cache could not be filled), and
    any GPU framework that was asked for or pulled in (with why that is wrong)."""
    missing = []
    before = {f for f in FRAMEWORKS if f in sys.modules}
    for name in modules:
        if name.split(".")[0] in FRAMEWORKS:
            missing.append(f"{name} (a GPU framework: never preloaded, or every try imports it before its cap hook)")
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    for framework in [f for f in FRAMEWORKS if f in sys.modules and f not in before]:
        missing.append(f"{framework} (pulled in by the preload: every try imports it before its cap hook)")
    if not _ssl_context():
        missing.append("ssl-context")
    return missing


def _ssl_context() -> bool:
    """The Execution API client's SSL context, which Airflow caches per process: building it
    loads certifi's CA bundle, 39 ms of CPU.  A LocalExecutor worker builds it for its first
    workload and reuses it; each of our tries is a fresh child, so the launcher builds it for
    all of them.  It is an in-memory object with no connection: forking it is safe."""
    try:
        from airflow.sdk.api import client
    except ImportError:
        return False
    cached = getattr(client.Client, "_get_ssl_context_cached", None)
    if cached is None:
        return False
    cached(getattr(client, "API_SSL_CA_FILE_PATH", None), getattr(client, "API_SSL_CERT_PATH", None))
    return True
