"""The interference fit under the observations real tries give: exact solo speeds, segments that
took no time, idle or unnamed co-tenants, one partner seen once.  A refit runs in the simulator's
passes and at the end of every try an executor concludes, so it must never fail; what it predicts
must stay a speed with its interval."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from carma_airflow.core.interference import CollocationObservation, InterferenceFit, InterferenceModel, Segment

FUZZ = settings.get_profile("carma-fuzz")
TYPES = ("a", "b", "c", "d", "")
activity = st.sampled_from((0.0, 0.05, 0.3, 0.55, 1.0)) | st.floats(0.0, 1.0)
# found by the deep run (CARMA_FUZZ=deep): a partner whose one segment took 5e-307 of the run (its
# information underflowed to 0.0: no term, yet its weight was read); ten alike tries that all ran at
# solo speed (their residuals all of one sign: the interval beside the point, not around it)
_SOLO = CollocationObservation(1.0, 0.0, (Segment(1.0, (0.05,), ()),), "a")
_UNDERFLOW = CollocationObservation(1.0, 0.0, (Segment(1.0, (), ()), Segment(5.18e-307, (0.0, 0.05), ("a", "a"))), "a")
stretch = st.sampled_from((1.0, 1.0, 1.25, 3.0)) | st.floats(0.5, 6.0)


@st.composite
def segments(draw: st.DrawFn) -> Segment:
    acts = draw(st.lists(activity, min_size=0, max_size=3))
    names = draw(st.lists(st.sampled_from(TYPES), min_size=0, max_size=len(acts)))  # some unnamed
    share = draw(st.sampled_from((0.0, 1.0, 0.5)) | st.floats(0.0, 1.0))
    return Segment(share, tuple(acts), tuple(names))


observation = st.builds(
    CollocationObservation,
    stretch,
    activity,
    st.lists(segments(), min_size=1, max_size=3).map(tuple),
    st.sampled_from(TYPES),
)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 20))  # a refit of up to 40 observations each
@given(
    st.lists(observation, min_size=8, max_size=40),
    st.lists(st.tuples(activity, activity, st.sampled_from(TYPES)), max_size=4),
)
@example([_SOLO] * 9 + [_UNDERFLOW], [])
@example([_SOLO] * 10, [])
def test_a_refit_never_fails_and_predicts_speeds_within_their_intervals(
    observations: list[CollocationObservation], probe: list[tuple[float, float, str]]
) -> None:
    fit = InterferenceFit.prior("A100-40GB").observe_all(observations)
    assert math.isfinite(fit.beta) and math.isfinite(fit.activity_scale)
    for own, other, name in probe or [(0.5, 0.5, "a")]:
        p = fit.predict(own, [other, 0.2], name, ["b", None])
        assert all(math.isfinite(x) for x in p)
        assert 0.0 < p.low <= p.speed <= p.high and 0.0 <= p.confidence <= 1.0
    # and the store's form reads back to the same predictions
    back = InterferenceModel.from_dict(InterferenceModel({"A100-40GB": fit}).to_dict()).fit_for("A100-40GB")
    assert back.predict(0.5, [0.5], "a", ["b"]) == fit.predict(0.5, [0.5], "a", ["b"])
