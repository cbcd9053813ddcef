"""The try's GPU model (``TaskRequest.gpu_model``): only GPUs of that model, matched word by word.

The worked example of docs/placement.md, "Adding a placement check": this module and its test
(tests/core/filters/test_gpu_model.py) are the whole check; the policies compose it
(:meth:`~carma_airflow.core.policies.base.Policy.placement_filters`) and the engine asks it as it
asks any per-try filter.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.task import TaskRequest


def _model_tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^0-9a-z]+", name.lower()) if t}


def model_matches(spec_name: str, wanted: str | None) -> bool:
    """``gpu_model`` matching, word by word in any order: "A100" and "A100-40GB" match NVML's
    "NVIDIA A100-SXM4-40GB", "H100-80GB" matches "NVIDIA H100 80GB HBM3"; "A100" does not match
    "RTX A1000"."""
    if wanted is None:
        return True
    words = _model_tokens(wanted)
    return bool(words) and words <= _model_tokens(spec_name)


class GpuModel(Filter):
    """Rejects a GPU that is not the model the try names (tries that name none skip it)."""

    name = "gpu-model"
    reason = Reason.MODEL
    per_try = True

    def applies(self, request: TaskRequest) -> bool:
        return request.gpu_model is not None

    def request_key(self, request: TaskRequest) -> Hashable:
        return request.gpu_model

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        spec = facts.state.spec.name
        if model_matches(spec, request.gpu_model):
            return None
        return Rejection(
            self.name, self.reason, "is not a {requested}", "model", requested=request.gpu_model, have=spec
        )

    def ever(self, state: GpuState, request: TaskRequest) -> bool:
        return model_matches(state.spec.name, request.gpu_model)

    def never(self, request: TaskRequest, gpus: Sequence[GpuState]) -> str:
        models = sorted({g.spec.name for g in gpus})
        return f"no GPU matches gpu_model={request.gpu_model!r}; this cluster has {', '.join(models)}"

    def headline(self, request: TaskRequest) -> str:
        return f"no GPU is a {request.gpu_model}"


__all__ = ["GpuModel", "model_matches"]
