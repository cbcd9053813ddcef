"""First-fit: the lowest-index GPU with enough free memory and no high risk."""

from carma_airflow.core.policies.base import Policy


class FirstFit(Policy):
    name = "first-fit"
    aliases = ("ff",)
    description = "idle GPUs first, then the lowest-index GPU that passes memory and risk checks"
