"""A try's PyTorch cap that follows its co-tenants (``[carma] isolation_cap = live``).

PyTorch's ``set_per_process_memory_fraction`` may be called again at any time, so a framework
cap need not stay where it was set at the try's start.  The executor keeps one small file per
fenced try (``CARMA_MEMORY_CAP_FILE``: the cap per GPU in MiB, ``"26624,26624"``) and rewrites
it as tenants arrive and leave (:func:`live_caps`, :func:`write_caps`); a daemon thread in the
try (:class:`CapFollower`) re-reads it once a second and sets the fraction again.  A tightened
cap frees nothing the try holds: the placer only places a newcomer in memory that is free, so
the new cap is above what the try held when the newcomer was placed.

Standard library and core only (it runs in the try's process).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from carma_airflow.core.fencing import IsolationMode, protective_cap_mib
from carma_airflow.taskrun.fence_env import SIM_LEAF_ENV, TryFence, mps_limits_from_env
from carma_airflow.taskrun.fence_env import _per_gpu as per_gpu

CAP_FILE_ENV = "CARMA_MEMORY_CAP_FILE"
PERIOD_S = 1.0


def read_caps(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    try:
        text = Path(path).read_text().strip()
        caps = tuple(int(part) for part in text.split(","))
    except (OSError, ValueError):
        return None
    return caps if caps and all(c > 0 for c in caps) else None


def write_caps(path: str | os.PathLike[str], caps: Sequence[int]) -> None:
    """Replace the try's cap file atomically (a reader never sees half a line)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".cap-")
    with os.fdopen(fd, "w") as handle:
        handle.write(",".join(str(int(c)) for c in caps))
    os.replace(tmp, target)


def live_caps(
    totals_mib: Sequence[int], reservation_mib: int, reserve_mib: int, others_by_gpu: Iterable[Iterable[int]]
) -> tuple[int, ...]:
    """A running try's cap on each of its GPUs now: the GPU less the reserve and its co-tenants'
    reservations, never below its own reservation."""
    return tuple(
        max(reservation_mib, protective_cap_mib(total, reserve_mib, ((r, 0) for r in others)))
        for total, others in zip(totals_mib, others_by_gpu, strict=True)
    )


def say(text: str) -> None:
    """One ``[carma]`` line of the try's log, on stdout (Airflow logs a task's stderr at level
    "error"), in one write with its newline: a cap follower says its lines from a thread of its
    own, and ``print`` writes a text and its newline apart, so a line could be cut by the try's."""
    sys.stdout.write(f"[carma] {text}\n")
    sys.stdout.flush()


class CapFollower(threading.Thread):
    """Calls ``apply(caps)`` each time the cap file says something new (a daemon thread)."""

    def __init__(self, path: str, apply: Callable[[tuple[int, ...]], None], period_s: float = PERIOD_S) -> None:
        super().__init__(name="carma-cap-follower", daemon=True)
        self.path = path
        self.apply = apply
        self.period_s = period_s
        self.stopped = threading.Event()
        self.last: tuple[int, ...] | None = read_caps(path)

    def check(self) -> bool:
        """Apply the file's caps if they changed; True when they did."""
        caps = read_caps(self.path)
        if caps is None or caps == self.last:
            return False
        self.last = caps
        self.apply(caps)
        return True

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            try:
                self.check()
            except Exception:  # a cap that cannot be set now is tried again at the next change
                continue


class SimulatedCaps:
    """What holds a try on simulated GPUs, as its real mechanism would (taskrun/simulated_training.py):

    * a framework or MPS cap set at the start (its environment), and under ``isolation_cap = live``
      re-set by the same :class:`CapFollower` thread a real PyTorch try runs, from the cap file
      the executor rewrites: a newcomer is exposed until the follower's next read; under MPS the
      pinned limit set at the start stays beneath it, so the try may hold the lower of the two
      (core/fencing.py ``FenceModel.start_bound``);
    * under ``driver``, the leaf's hard limit, which the ledger keeps and the executor re-sets
      (executor/starting/sim_driver.py); the process names its leaf on each allocation.

    The ledger re-reads nothing on an allocation beyond what the mechanism set.
    """

    def __init__(self, fence: TryFence, environ: Mapping[str, str], period_s: float = PERIOD_S) -> None:
        self.fence = fence
        self.leaf = (environ.get(SIM_LEAF_ENV) or None) if fence.mode is IsolationMode.DRIVER else None
        self.current = list(fence.cap_mib)
        # MPS: the client's pinned memory limit, read once at its start from its environment (a live
        # cap moves beneath it); none set: the whole GPU
        pinned = mps_limits_from_env(environ, len(fence.cap_mib)) if fence.mode is IsolationMode.MPS else None
        self.fixed = list(pinned) if pinned is not None else None
        self.follower: CapFollower | None = None
        path = environ.get(CAP_FILE_ENV)
        if path and fence.mode in (IsolationMode.FRAMEWORK, IsolationMode.DRIVER, IsolationMode.MPS):
            self.follower = CapFollower(path, self._apply, period_s)
            self.follower.start()

    def _apply(self, caps: tuple[int, ...]) -> None:
        self.current[: len(caps)] = caps[: len(self.current)]
        if self.leaf:  # the leaf's hard limit holds it (the executor re-sets it), not this cap
            return
        # the try's log says each re-set, as a real PyTorch try's does (framework_hook.cap_torch)
        beneath = ""
        if self.fixed is not None:
            beneath = f", beneath MPS's pinned memory limit of {per_gpu(tuple(self.fixed))} set at the client's start"
        say(
            f"memory cap now {per_gpu(tuple(self.current))} (PyTorch's fraction, re-set as co-tenants changed; "
            f"played by the simulated GPUs' ledger{beneath})"
        )

    def cap_mib(self, ordinal: int) -> int | None:
        """The cap the framework (or MPS) holds the process to now on its GPU ``ordinal``; None under
        a simulated driver, where the leaf's hard limit holds it."""
        if self.leaf:
            return None
        if self.fixed is not None:
            return min(self.fixed[ordinal], self.current[ordinal])
        return self.current[ordinal]

    def held_by_on(self, ordinal: int) -> str:
        """What sets the cap on the try's GPU ``ordinal`` now, for the OOM message."""
        mode = self.fence.mode
        if self.leaf:
            return "the driver's hard limit of its cgroup leaf (the ledger plays it)"
        fixed = self.fixed[ordinal] if self.fixed is not None and ordinal < len(self.fixed) else None
        if mode is IsolationMode.MPS and self.follower is not None:
            if fixed is None or self.current[ordinal] < fixed:
                beneath = (
                    f"beneath MPS's pinned memory limit of {fixed} MiB set at the client's start"
                    if fixed is not None
                    else "no MPS limit set"
                )
                return f"PyTorch's fraction, re-set as co-tenants come and go (from its cap file), {beneath}"
            return (
                f"MPS's pinned memory limit, set at the client's start at {fixed} MiB (PyTorch's fraction "
                "beneath it is re-set as co-tenants come and go)"
            )
        if mode is IsolationMode.MPS:
            return "MPS's pinned memory limit, set at the client's start"
        if self.follower is not None:
            return "framework cap, re-set as co-tenants come and go (PyTorch's fraction, from its cap file)"
        return "framework cap, fixed at the try's start (PyTorch's fraction)"

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stopped.set()


__all__ = ["CAP_FILE_ENV", "CapFollower", "SimulatedCaps", "live_caps", "read_caps", "say", "write_caps"]
