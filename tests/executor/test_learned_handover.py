"""What ended tries taught reaches the placement policy at most once per HANDOVER_S (learned.py):
each hand-over makes the policy predict every GPU afresh."""

from __future__ import annotations

from carma_airflow.core.interference import CollocationObservation
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.executor.learning.learned import HANDOVER_S, Learned


def _policy() -> CompletionTime:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    return policy


def _observe(learned: Learned) -> None:
    learned.model = learned.model.observe("A100-40GB", CollocationObservation.steady(1.4, 0.5, (0.5,), task="d.t"))


def test_the_first_hand_over_is_at_once_and_later_ones_wait_for_their_interval() -> None:
    learned, policy = Learned(), _policy()
    assert learned.hand_over(policy, 1000.0)
    assert policy.learned.model is learned.model
    _observe(learned)
    learned.add_solo("d", "t", 120.0)
    assert not learned.hand_over(policy, 1000.0 + HANDOVER_S / 2)  # too soon: the policy keeps the old
    assert policy.learned.model is not learned.model
    assert policy.learned.durations.expected("d.t") is None
    assert learned.hand_over(policy, 1000.0 + HANDOVER_S)
    assert policy.learned.model is learned.model
    assert policy.learned.durations.expected("d.t") == 120.0


def test_nothing_new_is_not_handed_over_and_a_run_time_alone_is() -> None:
    learned, policy = Learned(), _policy()
    learned.hand_over(policy, 0.0)
    version = policy.learned.version
    assert not learned.hand_over(policy, 10 * HANDOVER_S)  # nothing learned: the kept predictions stay
    assert policy.learned.version == version
    learned.add_solo("d", "t", 60.0)
    assert learned.hand_over(policy, 11 * HANDOVER_S)
    assert policy.learned.durations.expected("d.t") == 60.0
