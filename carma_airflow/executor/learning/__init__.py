"""What the executor learns and keeps: the learned memory read once at start and held in memory
(learned.py), GPU telemetry attributed to the tries that run (telemetry.py), and what an ended try
teaches: its peak, activity, solo run time, interference (learning.py)."""

from __future__ import annotations

from carma_airflow.executor.learning.learned import EndedTry, Family, Learned
from carma_airflow.executor.learning.learning import learn_from_success, remember_end, tell_while_running
from carma_airflow.executor.learning.telemetry import Attribution, Seen

__all__ = [
    "Attribution",
    "EndedTry",
    "Family",
    "Learned",
    "Seen",
    "learn_from_success",
    "remember_end",
    "tell_while_running",
]
