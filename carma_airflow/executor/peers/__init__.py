"""Several Airflow schedulers, each with a CarmaExecutor, on one store: the peers' heartbeat and the
placement pass under their reservations (peers.py), what one executor knows of the others
(peer_view.py), what gone ones left (peer_leftovers.py), the shared reservation ledger (shared_ledger.py)."""

from __future__ import annotations

from carma_airflow.executor.peers.peers import Peers, peer_id
from carma_airflow.executor.peers.shared_ledger import SharedLedger, record_of

__all__ = ["Peers", "SharedLedger", "peer_id", "record_of"]
