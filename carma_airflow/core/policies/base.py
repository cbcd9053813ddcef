"""What a placement policy is: which checks it applies and how it orders candidate GPUs.

A policy never mutates cluster state.  The placer computes one :class:`GpuFacts` per GPU per
pass, filters with the checks the policy switches on, then sorts the survivors with the
policy's keys (idle GPUs first, then collocation candidates).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from carma_airflow.core.decision import Reason
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime


@dataclass(frozen=True, slots=True)
class Refusal:
    """A policy's "not this GPU for this request": the reason (as data) and its text."""

    reason: Reason
    detail: str


@dataclass(slots=True)
class GpuFacts:
    """Per-pass, per-GPU numbers the filters and orderings use.  Updated as a pass places."""

    state: GpuState
    usable_free_mib: int
    idle: bool
    tenants: int
    exclusive_tenant: bool
    locked: bool
    smact: float  # window score, plus the prior of tenants the window has not seen yet
    smocc: float
    drama: float
    high_risk: bool
    joined: list[str] | None = None  # labels of tenants placed on it earlier in the same pass

    @property
    def index(self) -> int:
        return self.state.index

    @property
    def uuid(self) -> str:
        return self.state.uuid


class Policy:
    """Base class.  Subclasses set the flags and override :meth:`key` (lower sorts first)."""

    name = "base"
    aliases: tuple[str, ...] = ()
    description = ""
    collocates = True  # False: idle GPUs only (exclusive)
    checks_memory = True
    checks_risk = True
    uses_lock = True  # paper: a freshly used GPU is locked for lock_s
    uses_reservations = False  # ours: count reserved memory of tenants not yet visible
    max_tenants: int | None = None
    stable_keys = True  # keys depend on the GPU only, so a pass can keep candidates sorted
    # where :meth:`key` carries ``float(usable_free_mib)`` at this place, its fields before it
    # ordering coarsely (an activity band) and the ones after only breaking ties: inside one value
    # of the fields before it, the collocation pool is in ascending usable memory, so a scan may
    # skip a run of GPUs without the memory by binary search (None: the key says nothing of it)
    free_key_at: ClassVar[int | None] = None
    # True: :meth:`refuses` may turn a collocation candidate down for one request (the placer
    # asks it in the collocation scan, and tells requests of different activity apart)
    refuses_gpus = False
    # True: the policy prices its options (:meth:`pricer`): a pass tells it the clock and the queue
    # (:meth:`begin_pass`), and its decisions depend on each request's task type and activity
    prices_options: ClassVar[bool] = False

    def keeps_scarce_gpus(self) -> bool:
        """True: on a cluster of several GPU sizes the placer keeps the larger idle GPUs for the waiting
        tries only they can hold (core/scarce.py); the idle key should then order least capable first."""
        return False

    # Keys and ``admits`` may not depend on the request unless ``stable_keys`` is False.
    def idle_key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        """Order among idle GPUs: GPU index (the paper takes the first idle GPU)."""
        return (float(facts.index),)

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        """Order among collocation candidates."""
        return (float(facts.index),)

    def admits(self, facts: GpuFacts, request: TaskRequest, prior: float) -> bool:
        """Extra collocation check of a policy (``prior``: activity assumed for the newcomer)."""
        return True

    def refuses(self, facts: GpuFacts, request: TaskRequest) -> Refusal | None:
        """Why this collocation candidate must not take ``request`` (asked only when
        ``refuses_gpus`` is True, after the memory check); None: it may."""
        return None

    def describe(self, facts: GpuFacts, request: TaskRequest) -> str | None:
        """Extra reason text for choosing this GPU (appended to the chosen GPU's detail)."""
        return None

    def pool_token(self) -> Hashable | None:
        """Everything but a GPU's facts that the pools of a pass depend on (the checks' flags,
        the keys' parameters): while it stays equal, a placer reuses the last pass's pools for
        the GPUs whose facts did not change.  None (a policy whose keys move, such as a ring's
        cursor or a learned model): the pools are built afresh every pass."""
        if not self.stable_keys or self.refuses_gpus:
            return None
        flags = (self.collocates, self.checks_memory, self.checks_risk, self.uses_lock, self.uses_reservations)
        token = (type(self), flags, self.max_tenants, tuple(sorted(vars(self).items())))
        try:
            hash(token)
        except TypeError:  # a parameter that is not a plain value: no reuse
            return None
        return token

    def ranker(self) -> Callable[[TaskRequest, float], float | None] | None:
        """The policy's rank of the waiting tries inside one priority for the pass about to run
        (request, seconds waited -> lower first; None: overdue), or None: the queue's own order.
        See :mod:`carma_airflow.core.queueing`."""
        return None

    def begin_pass(self, now: float, waiting: int = 0, gpus: int = 1) -> None:
        """A pass starts at ``now`` over ``waiting`` tries on ``gpus`` GPUs (the placer calls it
        before every pass; nothing to do for a policy that only orders GPUs)."""

    def pricer(self) -> CompletionTime | None:
        """The policy as the pricer of a pass's options (``prices_options``), or None: the pass
        takes the first GPU set in the policy's order."""
        return None

    def rotate(self, chosen: list[GpuFacts], gpu_count: int) -> None:
        """Hook called after a placement (round-robin moves its cursor)."""
