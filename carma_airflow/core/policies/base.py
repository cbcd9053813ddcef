"""What a placement policy is: the filters it composes and how it orders the GPUs they pass.

A policy never mutates cluster state.  The placer computes one :class:`GpuFacts` per GPU per
pass, applies the policy's filters (:meth:`Policy.placement_filters`: each a named check that
says why not with its numbers, :mod:`carma_airflow.core.filtering`), then sorts the survivors with
the policy's keys (idle GPUs first, then collocation candidates).

The policy's settings that choose its filters (``collocates``, ``checks_memory``, ``checks_risk``,
``uses_lock``, ``max_tenants``) stay plain attributes, as deployments and benchmarks set them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, ClassVar

from carma_airflow.core.decision import Reason
from carma_airflow.core.engine_filters import MemoryFit
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.filters.gpu_model import GpuModel
from carma_airflow.core.filters.health import FreshTelemetry, Healthy
from carma_airflow.core.filters.lock import RecentPlacementLock
from carma_airflow.core.filters.risk_rule import RiskRule
from carma_airflow.core.filters.sharing import ExclusiveTenant, NoSharing, TenantCap
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime


class Refusal(Rejection):
    """A policy's "not this GPU for this request" known by its text (:meth:`Policy.refuses`): a
    :class:`~carma_airflow.core.filtering.Rejection` of the policy's own, without numbers."""

    __slots__ = ()

    def __new__(cls, reason: Reason, detail: str) -> Refusal:
        escaped = detail.replace("{", "{{").replace("}", "}}")
        return super().__new__(cls, "policy", reason, escaped)

    @property
    def detail(self) -> str:
        return self.text()


class Policy:
    """Base class.  Subclasses choose their filters (the settings below, :meth:`extra_filters`)
    and override :meth:`key` (lower sorts first)."""

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

    # Keys may not depend on the request unless ``stable_keys`` is False.
    def idle_key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        """Order among idle GPUs: GPU index (the paper takes the first idle GPU)."""
        return (float(facts.index),)

    def key(self, facts: GpuFacts, request: TaskRequest) -> tuple[float, ...]:
        """Order among collocation candidates."""
        return (float(facts.index),)

    def placement_filters(self, settings: PlacementSettings) -> tuple[Filter, ...]:
        """The filters this policy composes, in the order they are asked: per GPU (health, the
        sharing rules, the lock, the risk rule, then :meth:`extra_filters`), then per try (the GPU
        model, the memory fit).  A policy changes its filters by its settings above or by
        :meth:`extra_filters`; a new check is a new filter (docs/placement.md)."""
        filters: list[Filter] = [Healthy(), FreshTelemetry()]
        if not self.collocates:
            filters.append(NoSharing())
        filters.append(ExclusiveTenant())
        if self.max_tenants is not None:
            filters.append(TenantCap(self.max_tenants))
        if self.uses_lock:
            filters.append(RecentPlacementLock(settings.lock_s))
        if self.checks_risk:
            filters.append(RiskRule(settings.risk))
        filters.extend(self.extra_filters(settings))
        filters.append(GpuModel())
        if self.checks_memory:
            filters.append(MemoryFit(settings.headroom_mib))
        return tuple(filters)

    def extra_filters(self, settings: PlacementSettings) -> tuple[Filter, ...]:
        """A policy's own per-GPU filters, asked after the shared ones (a utilisation cap)."""
        return ()

    def refuses(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
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


__all__ = ["GpuFacts", "Policy", "Refusal"]
