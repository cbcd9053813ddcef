"""The executor's runtime: its parts and its try flow, started all or nothing.

LocalExecutor's ``start()`` makes its queues and forks, and that is all.  Ours makes a store
writer thread, a launcher process and its pipe, a monitor thread and the peers' heartbeat
thread, and reads the store.  :func:`start_runtime` makes them in one place, each one's close on
an ``ExitStack`` as it is made: it returns a :class:`Runtime` fully started (the flow's own start
included), or raises with everything it made closed again, so a start tried every few seconds
on standby (standby.py) leaks no thread, process or file descriptor.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.config.settings import CarmaSettings, default_state_dir
from carma_airflow.core.errors import CarmaError
from carma_airflow.executor.flow.flow import TryFlow
from carma_airflow.executor.flow.parts import Parts, build_parts

if TYPE_CHECKING:
    from carma_airflow.monitor.base import GpuSource
    from carma_airflow.store.store import Store

FAILED_START_CLOSE_S = 2.0  # a start that failed: how long its writer and launcher get to close


class NotStartedError(CarmaError):
    """The executor's parts are read before its start succeeded."""


def state_dir_of(conf: Any) -> Path:
    """``[carma] state_dir`` as the start reads it (settings.py): what lives before the start (the
    callbacks' results) lives there too."""
    raw = conf.get("carma", "state_dir", fallback=None)
    return Path(str(raw or "").strip() or default_state_dir())


class Runtime:
    """A started runtime; :meth:`close` stops what its start made, the last made first."""

    def __init__(self, parts: Parts, flow: TryFlow, closes: ExitStack, budget: list[float]):
        self.parts, self.flow = parts, flow
        self._closes = closes
        self._budget = budget  # the close timeout the parts' closes read (build_parts)

    def close(self, timeout_s: float = 10.0) -> None:
        """The peers' row marked stopped (a later executor adopts the running tries at once),
        remote dispatch's pending writes, the launcher, the store writer (up to ``timeout_s``
        each), the store's connections, the monitor.  Idempotent."""
        self._budget[0] = timeout_s
        self._closes.close()


def start_runtime(
    settings: CarmaSettings,
    make_flow: Callable[[Parts], TryFlow],
    *,
    background_writes: bool,
    monitor: GpuSource | None = None,
    store: Store | None = None,
) -> Runtime:
    """Build the parts, then the flow (``make_flow``), and start it; raises whatever failed, with
    what was made closed."""
    budget = [FAILED_START_CLOSE_S]
    with ExitStack() as stack:
        parts = build_parts(
            settings,
            stack,
            background_writes=background_writes,
            close_timeout_s=lambda: budget[0],
            monitor=monitor,
            store=store,
        )
        flow = make_flow(parts)
        stack.callback(flow.peers.close)  # marked stopped: a later executor adopts its running tries at once
        flow.start()
        return Runtime(parts, flow, stack.pop_all(), budget)
    raise AssertionError("unreachable")  # pragma: no cover  (mypy: an ExitStack may swallow)


__all__ = ["FAILED_START_CLOSE_S", "NotStartedError", "Runtime", "start_runtime", "state_dir_of"]
