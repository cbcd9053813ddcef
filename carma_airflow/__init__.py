"""carma-airflow: collocation-aware GPU placement for Apache Airflow.

The placement brains live in :mod:`carma_airflow.core` (pure, no I/O) and the trace
simulator in :mod:`carma_airflow.sim`.  Importing this package loads neither Airflow,
NVML nor SQLAlchemy.
"""

__version__ = "0.1.0"
