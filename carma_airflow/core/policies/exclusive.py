"""Exclusive: one task per GPU, the first idle one (the paper's baseline)."""

from carma_airflow.core.policies.base import Policy


class Exclusive(Policy):
    name = "exclusive"
    aliases = ("excl", "dedicated")
    description = "one task per GPU: only idle GPUs are used (baseline)"
    collocates = False
    checks_risk = False
