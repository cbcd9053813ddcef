"""The executor's placer keeps each fenced tenant's promise for its life, as the simulator's does
(core/facts.py, ``PlacementSettings.kept_margin_mib`` from the host's fence model): a newcomer is
never offered the rest of a co-tenant's reservation that the co-tenant's fence lets it grow into."""

from __future__ import annotations

from collections.abc import Callable

from carma_airflow.executor import CarmaExecutor


def test_a_fenced_host_keeps_promises_and_an_unfenced_one_does_not(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    assert executor_factory().flow.placer.settings.kept_margin_mib == 0  # auto: framework, live caps
    fixed = executor_factory(isolation="framework", isolation_cap="promise", isolation_margin_mib="1024")
    assert fixed.flow.placer.settings.kept_margin_mib == 1024  # a cap fixed at start carries the margin
    assert executor_factory(isolation="none").flow.placer.settings.kept_margin_mib is None  # the paper's count
