"""Who crashes when tenants' memory exceeds a GPU: the simulator's model of fenced collocation.

Two truths the placer never reads:

* **Memory growth** (``--memory-growth G``): each job's true peak exceeds the catalogue's by a
  seeded share ``g`` in ``[0, G)``, reached late in its run (between half and nine tenths of its
  solo work), as training does at a validation step or a longer sequence.  A hand-built trace
  may instead give a job's ``grows_to_mib`` and ``grows_after_s``, and its ``load_s`` (seconds on
  the CPU before its first allocation; by default the sharing model's ramp).
* **The fence** (``--host``, ``--isolation``, ``--cap-rule``): the host's mechanisms (a profile:
  ``framework`` only, an MPS daemon, or NVML per-cgroup ``driver`` limits), the mechanism asked
  for (``auto`` resolves on that host exactly as the executor's does, core/fence_host.resolve) and
  the cap rule (``promise``, ``protective``, ``live``; the executor's default unless given).  The
  model of each mechanism is core/fencing.py's :class:`~carma_airflow.core.fencing.FenceModel`,
  the one the executor's simulated GPUs use: a cap set at the try's start, or (``live``) re-set a
  few seconds after each co-tenant arrives or leaves; between the arrival and the re-set the old
  cap holds (the exposure window).  Under MPS ``live`` the live cap moves beneath the pinned limit
  fixed at the try's start (the GPU less its co-tenants then, plus the margin): the try may hold
  the lower of the two.

Unfenced, an allocation fails only where the GPU has no room left, and when a grower takes the
last of it the try that allocates next crashes, whoever grew (:func:`next_allocator`): a
co-tenant that stayed within what the placer counted for it is then a *victim*.  (A try's first allocation, at
the end of its load, fails in that try.)  Fenced, an allocation past the try's cap fails in the
try that asked, "past its cap".

**A promise holds from placement**: a placed try counts against every co-tenant's cap at its
promise (its reservation, plus the margin under a cap fixed at the start), or what it holds when
it holds more, from the moment it is placed, whether or not it has allocated yet, until it has
allocated and the placer's lock window has passed; from then on at what it holds, as the
placer counts it (core/fencing.counted_mib: the placer offers the rest to newcomers then).
A victim is a try that crashed asking for no more than the placer counted for it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fence_host import HostIsolation, resolve
from carma_airflow.core.fencing import (
    DEFAULT_CAP_RULE,
    PAST_CAP,
    CapRule,
    FenceModel,
    IsolationMode,
    default_rule,
)

if TYPE_CHECKING:
    from carma_airflow.sim.config import SimConfig
    from carma_airflow.sim.gpus import SimRun
    from carma_airflow.sim.workload import Arrival

T = TypeVar("T")
GROWTH_START, GROWTH_END = 0.5, 0.9  # when a job grows, as a share of its solo work

# --host: what a GPU host offers to fence its tries (core/fence_host.HostIsolation)
HOST_PROFILES = ("framework", "mps", "driver")
DEFAULT_HOST = "framework"  # the common real host: no MPS daemon, no r615+ driver with cgroup v2


def host_profile(text: str) -> HostIsolation:
    """A ``--host`` profile as the executor's host detection would report it."""
    name = parse_host(text)
    if name == "mps":
        return HostIsolation("nvml", mps_daemon=True, driver_why="no r615+ driver with cgroup v2 on this host")
    if name == "driver":
        return HostIsolation("nvml", driver_limits=True, driver_why="r615+ driver, cgroup v2, root")
    return HostIsolation("nvml", driver_why="no r615+ driver with cgroup v2 on this host")


def parse_host(text: str) -> str:
    name = str(text).strip().lower()
    if name not in HOST_PROFILES:
        raise ConfigError(f"--host {text!r}: use one of {' | '.join(HOST_PROFILES)}")
    return name


def default_cap_rule(mode: IsolationMode) -> CapRule:
    """The executor's default ``[carma] isolation_cap`` (core/fencing.DEFAULT_CAP_RULE, which
    carma_airflow/settings.py takes) as ``mode`` plays it (core/fencing.FenceModel.of)."""
    return default_rule(mode)


@dataclass(frozen=True, slots=True)
class SimFence:
    """What a simulation fences with, and why (its result says it)."""

    host: str
    requested: IsolationMode
    model: FenceModel
    why: str

    def summary(self) -> dict[str, object]:
        return {
            "host": self.host,
            "isolation": self.requested.value,
            "mechanism": self.model.mode.value,
            "cap_rule": self.model.rule.value if self.model.fenced else "-",
            "fence": self.model.describe(),
        }


def sim_fence(config: SimConfig) -> SimFence:
    """Resolve ``config``'s host, isolation and cap rule as the executor would on that host
    (ConfigError for a mechanism the host lacks or a name nobody knows)."""
    host = parse_host(config.host)
    requested = IsolationMode.parse(config.isolation, where="--isolation")
    resolved = resolve(requested, host_profile(host))
    rule = DEFAULT_CAP_RULE if config.cap_rule is None else CapRule.parse(config.cap_rule, "--cap-rule")
    model = FenceModel.of(resolved.mode, rule)  # normalised: under MPS live is start-bound
    return SimFence(host, requested, model, resolved.why)


@dataclass(frozen=True, slots=True)
class Growth:
    """One job's growth: ``share`` of its catalogue peak more, once ``at`` of its solo work is done."""

    share: float
    at: float

    def extra_mib(self, peak_mib: int) -> int:
        return int(peak_mib * self.share)


def growth_of(job_id: int, growth: float, seed: int = 0) -> Growth | None:
    """The seeded growth truth of one job (None without growth): the same for each of its tries."""
    if growth <= 0:
        return None
    rng = random.Random(f"memory-growth:{seed}:{job_id}")
    return Growth(rng.uniform(0.0, growth), rng.uniform(GROWTH_START, GROWTH_END))


def job_growth(arrival: Arrival, growth: float, seed: int, load_s: float) -> tuple[int, float] | None:
    """A job's growth as ``(extra MiB, the solo work done when it grows)``: the trace's own
    (``grows_to_mib``, ``grows_after_s`` past its first allocation, ``load_s`` in), else the
    seeded draw; None when it does not grow."""
    task = arrival.task
    if arrival.grows_to_mib is not None:
        extra = arrival.grows_to_mib - task.peak_mib
        return (extra, min(task.solo_s, load_s + (arrival.grows_after_s or 0.0))) if extra > 0 else None
    g = growth_of(arrival.job_id, growth, seed)
    if g is None or g.extra_mib(task.peak_mib) <= 0:
        return None
    return g.extra_mib(task.peak_mib), g.at * task.solo_s


@dataclass(frozen=True, slots=True)
class Refusal:
    """An allocation that failed: a CUDA OOM in the try that asked."""

    # what the try needed when refused: what it held plus what it asked for, as its OOM message says
    # (PyTorch's "Tried to allocate ... this process has ..."), on a full GPU as past its cap; its
    # next try is sized from it (core/recovery.py oom_reached, as the executor sizes it)
    reached_mib: int
    past_cap: bool  # it hit its own cap while the GPU had room (or would have)
    victim: bool  # it asked for no more than the placer counts for it: someone else took its memory
    cap_mib: int | None = None  # the cap it hit (past_cap)


def allocate(
    *,
    total_mib: int,
    used_mib: int,
    held_mib: int,
    asked_mib: int,
    counted_mib: int,
    cap_mib: int | None,
) -> Refusal | None:
    """Whether a try holding ``held_mib`` on a GPU gets ``asked_mib`` more (None) or crashes.

    ``counted_mib``: what the placer counts for the try now (core/fencing.counted_mib of its
    reservation: a refused try that asked for no more is a victim); ``cap_mib``: what the try may
    hold there now (``FenceModel.may_hold_mib``; None unfenced)."""
    victim = held_mib + asked_mib <= counted_mib
    if cap_mib is not None and held_mib + asked_mib > cap_mib:
        return Refusal(held_mib + asked_mib, True, victim, cap_mib)
    free = total_mib - used_mib
    if asked_mib > free:
        return Refusal(held_mib + asked_mib, False, victim)
    return None


def next_allocator(crowd: Sequence[T], job_id: int, now: float, seed: int = 0) -> T | None:
    """Unfenced, which process's allocation fails when a grower takes the last of a GPU: each of
    its co-tenants (``crowd``) allocates every step as the grower does, so each is as likely as
    the grower (None).  Seeded by the grower's job and the time."""
    if not crowd:
        return None
    pick = random.Random(f"next-allocator:{seed}:{job_id}:{now!r}").randrange(len(crowd) + 1)
    return crowd[pick] if pick < len(crowd) else None


def worst(refusals: Iterable[Refusal | None]) -> Refusal | None:
    """A multi-GPU try's outcome: refused on any GPU, at the least it reached there."""
    found = [r for r in refusals if r is not None]
    if not found:
        return None
    caps = [r.cap_mib for r in found if r.cap_mib is not None]
    return Refusal(
        min(r.reached_mib for r in found),
        any(r.past_cap for r in found),
        any(r.victim for r in found),
        min(caps) if caps else None,
    )


@dataclass(slots=True)
class CrashTally:
    """What the OOM crashes of a run cost: how many, how many were victims (asked for no more than
    the placer counted for them), and the GPU-seconds the crashed tries had run and threw away."""

    oom_crashes: int = 0
    victims: int = 0
    crashed_gpu_s: float = 0.0  # all thrown away without checkpoints
    lost_gpu_s: float = 0.0  # thrown away: since the try's last checkpoint (or its start)

    def count(self, started: float, saved_at: float | None, gpus: int, victim: bool, now: float) -> float:
        """One crash at ``now`` of a try started at ``started`` on ``gpus`` GPUs that last saved a
        checkpoint at ``saved_at``: the GPU-seconds it threw away."""
        ran = (now - started) * gpus
        lost = ran if saved_at is None else (now - saved_at) * gpus
        self.oom_crashes += 1
        self.victims += victim
        self.crashed_gpu_s += ran
        self.lost_gpu_s += lost
        return lost


def crash_reason(run: SimRun, refused: Refusal) -> str:
    """What a crashed try's log would say: a cap OOM names the try past its cap (the grower)."""
    placed = run.request.memory.mib
    if refused.past_cap:
        return (
            f"simulated CUDA out of memory: {run.request.label} {PAST_CAP} of {refused.cap_mib} MiB at "
            f"{refused.reached_mib} MiB (placed with {placed} MiB; the rest of the GPU is promised to its co-tenants)"
        )
    why = "a co-tenant took memory promised to it" if refused.victim else "it grew past its reservation"
    return (
        f"simulated CUDA out of memory: {run.request.label}'s GPU was full; it needed {refused.reached_mib} MiB, "
        f"held plus asked (placed with {placed} MiB; {why})"
    )


__all__ = [
    "DEFAULT_HOST",
    "HOST_PROFILES",
    "CrashTally",
    "Growth",
    "Refusal",
    "SimFence",
    "allocate",
    "crash_reason",
    "default_cap_rule",
    "growth_of",
    "host_profile",
    "job_growth",
    "next_allocator",
    "parse_host",
    "sim_fence",
    "worst",
]
