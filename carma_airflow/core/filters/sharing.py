"""Who may share a GPU: not under an exclusive policy, not with an exclusive tenant, not past the
policy's tenant cap."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.task import TaskRequest


class NoSharing(Filter):
    """An exclusive policy: a GPU with tenants takes nobody else."""

    name = "no-sharing"
    reason = Reason.BUSY

    def __init__(self) -> None:
        self._by_tenants: dict[int, Rejection] = {}  # one rejection per tenant count (a pass classifies many GPUs)

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        tenants = facts.tenants
        got = self._by_tenants.get(tenants)
        if got is None:
            form = "has {have} tenant(s); exclusive policy"
            got = self._by_tenants[tenants] = Rejection(self.name, self.reason, form, "tenants", have=tenants, limit=0)
        return got


class ExclusiveTenant(Filter):
    """A GPU held by a try that asked for it alone takes nobody else."""

    name = "exclusive-tenant"
    reason = Reason.EXCLUSIVE_TENANT

    def __init__(self) -> None:
        self._by_tenants: dict[int, Rejection] = {}

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        if not facts.exclusive_tenant:
            return None
        tenants = facts.tenants
        got = self._by_tenants.get(tenants)
        if got is None:
            form = "held by an exclusive task"
            got = self._by_tenants[tenants] = Rejection(self.name, self.reason, form, "tenants", have=tenants, limit=1)
        return got


class TenantCap(Filter):
    """At most ``cap`` tenants on a GPU (per-task slowdown grows with every co-tenant)."""

    name = "tenant-cap"
    reason = Reason.TENANT_CAP

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        if facts.tenants < self.cap:
            return None
        return Rejection(
            self.name,
            self.reason,
            "{have} tenants (cap {limit})",
            "tenants",
            requested=1,
            have=facts.tenants,
            limit=self.cap,
        )


__all__ = ["ExclusiveTenant", "NoSharing", "TenantCap"]
