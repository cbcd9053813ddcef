"""The placement filters policies compose, one check per module (:mod:`carma_airflow.core.filtering`
says what a filter is; docs/placement.md, "Adding a placement check", how to add one).

Per GPU: :mod:`.health` (quarantined, stale telemetry), :mod:`.sharing` (an exclusive policy, an
exclusive tenant, the tenant cap), :mod:`.lock` (placed on moments ago), :mod:`.risk_rule` (the
paper's high-risk rule), :mod:`.utilisation_cap` (projected SM activity over a cap).  Per try:
:mod:`.gpu_model` (the try's ``gpu_model``).  The memory fit and the engine's other per-try checks
are in :mod:`carma_airflow.core.engine_filters`.
"""
