"""learned_view: the learned activity and interference as the CLI and the page show them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from carma_airflow.core.interference import (
    DEFAULT_INTERFERENCE_SETTINGS,
    CollocationObservation,
    InterferenceModel,
    slowdown,
)
from carma_airflow.views.learned import (
    INTERFERENCE_DOCUMENT,
    activity,
    activity_line,
    fit_lines,
    interference,
    nothing_learned_line,
)

AT = datetime(2026, 12, 14, 9, 30, tzinfo=timezone.utc)


def learned_document(n: int = 30, beta: float = 0.9, scale: float = 0.8) -> dict[str, Any]:
    """What an executor writes after ``n`` collocated tries on A100s and 3 on H100s."""
    model = InterferenceModel()
    for i in range(n):
        own, co = 0.3 + 0.02 * (i % 20), [0.2 + 0.03 * (i % 15)]
        model = model.observe("A100-SXM4-40GB", CollocationObservation.steady(slowdown(own, co, beta, scale), own, co))
    for _ in range(3):
        model = model.observe("H100", CollocationObservation.steady(1.4, 0.5, [0.5]))
    return model.to_dict()


def test_a_learned_model_shows_its_coefficients_and_a_prior_one_says_so() -> None:
    document = learned_document()
    learned = interference({INTERFERENCE_DOCUMENT: (AT, document)})
    assert learned["written_at"] == AT.isoformat() and learned["problems"] == []
    a100, h100 = learned["models"]
    assert a100["gpu_model"] == "a100-sxm4-40gb" and a100["learned"]
    fit = InterferenceModel.from_dict(document).fit_for("A100-SXM4-40GB")  # what an executor starts with
    assert (a100["beta"], a100["activity_scale"], a100["confidence"]) == (fit.beta, fit.activity_scale, fit.confidence)
    assert a100["beta"] > 0.6 and a100["activity_scale"] < 0.95  # moved from the prior toward 0.9 and 0.8
    assert a100["beta_range"][0] < a100["beta"] < a100["beta_range"][1]
    assert (a100["count"], a100["kept"], a100["outliers"]) == (30, 30, 0)
    assert a100["confidence"] > 0.8
    assert a100["prior"] == {"beta": 0.1, "activity_scale": 1.0}  # the cold prior (COLD_PRIOR_BETA)
    assert h100["gpu_model"] == "h100" and not h100["learned"] and h100["count"] == 3
    assert (h100["beta"], h100["activity_scale"]) == (0.1, 1.0)
    lines = fit_lines(a100, learned["prior"]["min_observations"])
    assert lines[0].startswith("a100-sxm4-40gb: learned from 30 observations (30 kept, 0 outliers), confidence ")
    assert lines[1].startswith(f"  beta {fit.beta:.3f} (range ") and lines[1].endswith("prior 0.100")
    assert fit_lines(h100, 10)[0] == "h100: still the prior (3 of 10 observations needed), confidence 0.10"


def test_no_document_means_nothing_learned_and_the_prior() -> None:
    learned = interference({})
    assert learned["models"] == [] and learned["written_at"] is None
    assert learned["prior"] == {"beta": 0.1, "activity_scale": 1.0, "confidence": 0.1, "min_observations": 10}
    assert nothing_learned_line() == (
        "nothing learned yet: every GPU model uses the prior (beta 0.10, activity scale k 1.00, confidence 0.10); "
        "a model is fitted after 10 ended tries that shared its GPUs"
    )


def test_an_unreadable_entry_is_reported_not_raised() -> None:
    document: dict[str, Any] = learned_document()
    document["broken"] = {"observations": [["not", "a", "triple", "x"]]}
    document["version"] = 1
    learned = interference({INTERFERENCE_DOCUMENT: (AT, document)})
    assert [m["gpu_model"] for m in learned["models"]] == ["a100-sxm4-40gb", "h100"]
    assert len(learned["problems"]) == 2
    assert learned["problems"][0].startswith("broken: cannot be read (ValueError")
    assert learned["problems"][1].startswith("version: not a fit (int)")


def test_the_refit_uses_the_settings_given() -> None:
    strict = type(DEFAULT_INTERFERENCE_SETTINGS)(min_observations=50)
    learned = interference({INTERFERENCE_DOCUMENT: (AT, learned_document())}, strict)
    assert not learned["models"][0]["learned"]  # 30 observations are too few under these settings


def test_a_tasks_activity_from_its_history() -> None:
    history = [(0.40, "process"), (0.44, "process"), (0.42, "gpu-alone"), (0.41, "process"), (0.43, "process")]
    summary = activity(history)
    assert summary["known"] and summary["count"] == 5
    assert summary["sm_activity"] == pytest.approx(0.42)
    assert summary["sources"] == ["process", "gpu-alone"]
    assert activity_line(summary) == "activity: 0.42 (5 tries, spread 0.02, process, gpu-alone)"
    one = activity([(0.7, "process")])
    assert activity_line(one) == "activity: 0.70 (1 try, spread 0.15, process)"


def test_no_history_is_the_prior() -> None:
    summary = activity([])
    assert not summary["known"] and summary["count"] == 0
    assert activity_line(summary) == "no activity learned yet (prior 0.50)"


def test_carma_why_learns_activity_as_the_executor_does_leaving_shared_tries_out() -> None:
    # issue 41: a try read beside others (0.28) does not drag a task seen alone (0.50)
    summary = activity([(0.5, "process", False), (0.28, "process", True)])
    assert summary["sm_activity"] == 0.5 and summary["count"] == 1
    assert activity([(0.28, "process", True)])["sm_activity"] == 0.28  # only ever shared: that
