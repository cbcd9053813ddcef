"""Example workloads for the DAGs in ``dags/`` (importable, so tests can run them)."""
