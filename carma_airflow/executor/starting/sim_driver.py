"""Driver caps on simulated GPUs: each try's hard limits kept in the ledger, as NVML keeps a cgroup's.

``isolation = driver`` on ``gpu_backend = simulated`` has no cgroup and no NVML call; the ledger
plays both (monitor/ledger.py :meth:`~carma_airflow.monitor.ledger.Ledger.set_limits`).  The
executor opens a *leaf* per try when it places it, re-sets its hard limits as a real executor
re-sets NVML's (``isolation_cap = live``), and drops it when the try has ended, with the same
three calls as :class:`~carma_airflow.taskrun.driver_cap.DriverCaps`.  The try's process names
its leaf (``CARMA_SIM_DRIVER_LEAF``) on each allocation; every process of a leaf counts
against its limit on each GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from carma_airflow.monitor.ledger import Ledger, LedgerError
from carma_airflow.taskrun.driver_cap import DriverCapError


class SimulatedDriverCaps:
    """The executor's simulated leaves: one per driver-capped try, keyed by its request key."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.leaves: dict[str, tuple[str, tuple[str, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def open(
        self, key: str, try_id: str, uuids: Sequence[str], promise_mib: Sequence[int], cap_mib: Sequence[int]
    ) -> str:
        """The try's leaf with soft = its promise, hard = its cap on each GPU; its name for the try."""
        self._set(try_id, uuids, promise_mib, cap_mib)
        self.leaves[key] = (try_id, tuple(uuids), tuple(promise_mib), tuple(cap_mib))
        return try_id

    def update(self, key: str, cap_mib: Sequence[int]) -> bool:
        """Re-set a running try's hard limits; True when they changed."""
        if key not in self.leaves:
            return False
        leaf, uuids, promise, caps = self.leaves[key]
        if tuple(cap_mib) == caps:
            return False
        self._set(leaf, uuids, promise, cap_mib)
        self.leaves[key] = (leaf, uuids, promise, tuple(cap_mib))
        return True

    def keep(self, running: Iterable[str]) -> None:
        """The leaves of tries that ended go."""
        alive = set(running)
        gone = [self.leaves.pop(k)[0] for k in [k for k in self.leaves if k not in alive]]
        if gone:
            with contextlib.suppress(LedgerError):  # the ledger went: nothing holds these limits any more
                self.ledger.drop_limits(gone)

    def _set(self, leaf: str, uuids: Sequence[str], promise_mib: Sequence[int], cap_mib: Sequence[int]) -> None:
        limits = {u: (min(p, c), c) for u, p, c in zip(uuids, promise_mib, cap_mib, strict=True)}
        try:
            self.ledger.set_limits(leaf, limits)
        except LedgerError as exc:
            raise DriverCapError(f"cannot set the simulated driver limits of {leaf}: {exc}") from exc


__all__ = ["SimulatedDriverCaps"]
