"""Several GPU hosts: agents publish GPUs to the shared store, Celery workers run the tries.

- :mod:`~carma_airflow.distributed.agent`: ``carma agent``, one per GPU host, samples the host's
  GPUs (NVML or simulated) and publishes them with a heartbeat to the store.
- :mod:`~carma_airflow.distributed.cluster`: the executor's view over every host (a
  :class:`~carma_airflow.monitor.base.GpuSource`); hosts whose agent or worker went silent leave it.
- :mod:`~carma_airflow.distributed.dispatch`: the executor's launcher: a placed try goes to its
  host's Celery queue with its devices in the message.
- :mod:`~carma_airflow.distributed.celery_tasks`: what the host's Airflow Celery worker runs.

Only :mod:`dispatch` and :mod:`celery_tasks` import Celery or Airflow.
"""
