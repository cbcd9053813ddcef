"""The GPU-model filter (core/filters/gpu_model.py): the worked example of a placement check that is
one filter module and this test (docs/placement.md, "Adding a placement check")."""

from __future__ import annotations

import pytest
from helpers import A100, A100_80, H100, L4, busy_gpu, idle_gpu, request, view

from carma_airflow.core import Outcome, Placer, Reason
from carma_airflow.core.facts import gpu_facts
from carma_airflow.core.filters.gpu_model import GpuModel, model_matches
from carma_airflow.core.policies import make_policy
from carma_airflow.core.settings import DEFAULT_SETTINGS


@pytest.mark.parametrize(
    ("name", "wanted", "ok"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100-40GB", True),
        ("NVIDIA A100-SXM4-40GB", "a100", True),
        ("NVIDIA H100 80GB HBM3", "H100-80GB", True),
        ("A100-40GB", "A100-40GB", True),
        ("NVIDIA A100-SXM4-80GB", "A100-40GB", False),
        ("NVIDIA A10", "A100", False),
        ("NVIDIA RTX A1000", "A100", False),
    ],
)
def test_gpu_model_matches_nvml_names_word_by_word(name: str, wanted: str, ok: bool) -> None:
    assert model_matches(name, wanted) is ok


def test_the_filter_states_what_was_asked_and_what_the_gpu_is() -> None:
    policy = make_policy("interference-aware")
    facts = gpu_facts(policy, DEFAULT_SETTINGS, [idle_gpu(0, A100), idle_gpu(1, H100)], 0.0, None)
    flt = GpuModel()
    asks = request("r", 1000, gpu_model="H100")
    assert flt.applies(asks) and not flt.applies(request("r", 1000))
    assert flt.check(facts[1], asks) is None
    refused = flt.check(facts[0], asks)
    assert refused is not None
    assert (refused.filter, refused.reason, refused.requested, refused.have) == (
        "gpu-model",
        Reason.MODEL,
        "H100",
        A100.name,
    )
    assert refused.text() == "is not a H100"
    assert flt.ever(facts[1].state, asks) and not flt.ever(facts[0].state, asks)


def test_every_shipped_policy_composes_it() -> None:
    for name in ("exclusive", "first-fit", "interference-aware", "predictive", "completion-time", "static-2"):
        assert any(isinstance(f, GpuModel) for f in make_policy(name).placement_filters(DEFAULT_SETTINGS)), name


@pytest.mark.parametrize("wanted", ["H100", "h100-80gb", " H100 "])
def test_gpu_model_constraint(wanted: str) -> None:
    v = view(idle_gpu(0, A100), idle_gpu(1, H100), idle_gpu(2, L4))
    d = Placer(make_policy("interference-aware")).decide(request("r", 1000, gpu_model=wanted), v)
    assert d.gpu_uuids == ("GPU-1",)
    # a placed decision lists the GPUs passed over before the chosen one (GPU 0, not GPU 2), each
    # with the filter's rejection
    model = [v for v in d.rejected if v.reason is Reason.MODEL]
    assert {v.index for v in model} == {0}
    assert model[0].rejection is not None and model[0].rejection.filter == "gpu-model"
    assert model[0].detail == f"is not a {wanted}"
    waiting = Placer(make_policy("interference-aware")).decide(request("r", 90000, gpu_model=wanted), v)
    assert waiting.outcome is Outcome.NEVER_FITS


def test_a_try_whose_model_is_full_waits_with_every_gpus_reason() -> None:
    v = view(idle_gpu(0, A100), busy_gpu(1, 10000, spec=H100), busy_gpu(2, 10000, spec=A100))
    d = Placer(make_policy("interference-aware")).decide(request("r", 40000, gpu_model="H100"), v)
    assert d.outcome is Outcome.NOT_NOW
    by_index = {v.index: v.reason for v in d.rejected}
    assert by_index == {0: Reason.MODEL, 1: Reason.MEMORY, 2: Reason.MODEL}
    assert "2 of 3 GPUs gpu-model, 1 memory" in d.summary


def test_gpu_model_unavailable_never_fits() -> None:
    d = Placer(make_policy("interference-aware")).decide(
        request("r", 1000, gpu_model="H200"), view(idle_gpu(0, A100), idle_gpu(1, L4))
    )
    assert d.outcome is Outcome.NEVER_FITS
    assert "H200" in d.summary and "A100-40GB" in d.summary and "L4" in d.summary


def test_gpu_model_memory_limit_uses_matching_gpus_only() -> None:
    placer = Placer(make_policy("interference-aware"))
    v = view(idle_gpu(0, A100_80), idle_gpu(1, L4))
    assert placer.decide(request("r", 30000, gpu_model="L4"), v).outcome is Outcome.NEVER_FITS
    assert placer.decide(request("r", 30000), v).gpu_uuids == ("GPU-0",)
