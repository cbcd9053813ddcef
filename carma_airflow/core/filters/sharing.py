"""Who may share a GPU: not under an exclusive policy, not with an exclusive tenant, not past the
policy's tenant cap."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.task import TaskRequest


class _ByTenants:
    """A filter's rejection for each tenant count, made once (a pass classifies many GPUs, and
    GPUs with the same number of tenants are refused in the same words)."""

    def __init__(self, filter: Filter, form: str, limit: int) -> None:
        self._filter = filter
        self._form = form
        self._limit = limit
        self._made: dict[int, Rejection] = {}

    def __call__(self, tenants: int) -> Rejection:
        got = self._made.get(tenants)
        if got is None:
            flt = self._filter
            got = Rejection(flt.name, flt.reason, self._form, "tenants", have=tenants, limit=self._limit)
            self._made[tenants] = got
        return got


class NoSharing(Filter):
    """An exclusive policy: a GPU with tenants takes nobody else."""

    name = "no-sharing"
    reason = Reason.BUSY

    def __init__(self) -> None:
        self._rejection = _ByTenants(self, "has {have} tenant(s); exclusive policy", limit=0)

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return self._rejection(facts.tenants)  # asked of GPUs with tenants only


class ExclusiveTenant(Filter):
    """A GPU held by a try that asked for it alone takes nobody else."""

    name = "exclusive-tenant"
    reason = Reason.EXCLUSIVE_TENANT

    def __init__(self) -> None:
        self._rejection = _ByTenants(self, "held by an exclusive task", limit=1)

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        if not facts.exclusive_tenant:
            return None
        return self._rejection(facts.tenants)


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
