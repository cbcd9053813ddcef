"""Run-time estimates for task types seen once or never: pooled by the label's family and size,
then by the nearest shared prefix, then the median over every measured type (issue 23)."""

from __future__ import annotations

import math

import pytest

from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.core.policies.durations import alone_from_shared
from carma_airflow.core.policies.forecast import DurationBook, LearnedForecast
from carma_airflow.core.task import MemoryNeed, TaskRequest

# the others: long, so the median over every measured type (900 s) is far from each family's
OTHERS = (("vgg", 3000.0), ("BERT_base", 900.0), ("maskrcnn", 6000.0))


def _book(*runs: tuple[str, float], pooled: bool = True) -> DurationBook:
    book = DurationBook(pooled=pooled)
    for kind, seconds in (*OTHERS, *runs):
        book.add(kind, seconds)
    return book


@pytest.mark.parametrize(
    ("label", "family", "size"),
    [
        ("resnet50_64", "resnet50", 64),
        ("mobilenet3", "mobilenet", 3),
        ("vgg", "vgg", 1),
        ("resnet34_cifar100_20e_2", "resnet34_cifar100_20e", 2),
        ("xlnet_large_cased_2", "xlnet_large_cased", 2),
        ("nightly.train-bert-16", "nightly.train-bert", 16),
        ("2024", "2024", 1),
    ],
)
def test_a_label_names_its_family_and_size(label: str, family: str, size: int) -> None:
    from carma_airflow.core.policies.durations import family_of

    assert family_of(label) == (family, size)


def test_a_type_never_measured_takes_its_familys_run_time_not_the_median_of_all() -> None:
    book = _book(("resnet34_cifar100_20e_3", 264.0))
    assert book.expected("resnet34_cifar100_20e_2") == 264.0  # one size measured: its run time
    assert not book.measured("resnet34_cifar100_20e_2")
    assert book.expected("vgg2") == 3000.0  # ``vgg`` is the family's size 1
    assert book.expected("dlrm") == 1950.0  # nothing alike: the median of 264, 900, 3000, 6000


def test_a_familys_size_trend_scales_the_estimate_within_a_halving_or_doubling() -> None:
    book = _book(("mobilenet_cifar100_20e_1", 1140.0), ("mobilenet_cifar100_20e_2", 600.0))
    got = book.expected("mobilenet_cifar100_20e_3")
    slope = math.log(600.0 / 1140.0) / math.log(2.0)  # the fit through both points
    assert got == pytest.approx(1140.0 * 3.0**slope)
    assert 300.0 < got < 600.0
    # a steeper trend is bounded: doubling the size at most halves the run
    steep = _book(("a_1", 1000.0), ("a_2", 100.0))
    mx, my = math.log(2.0) / 2.0, (math.log(1000.0) + math.log(100.0)) / 2.0
    assert steep.expected("a_4") == pytest.approx(math.exp(my - (math.log(4.0) - mx)))
    assert steep.expected("a_4") > 100.0 / 2.0  # the unbounded fit (slope -3.3) would say 10 s


def test_without_its_family_a_type_takes_the_nearest_prefix_shared_with_measured_types() -> None:
    book = _book(
        ("resnet34_cifar100_20e_3", 264.0), ("resnet34_cifar100_20e_1", 996.0), ("xlnet_large_cased_2", 3524.0)
    )
    # no 50-epoch run yet: the 20-epoch ones of the same model and data set
    assert book.expected("resnet34_cifar100_50e_3") == pytest.approx((264.0 + 996.0) / 2.0)
    assert book.expected("xlnet_base_cased_2") == 3524.0  # first token: ``xlnet``
    assert book.expected("BERT") == 900.0  # a family that others extend: ``BERT_base``


def test_a_types_own_runs_always_win_over_the_pool() -> None:
    book = _book(("resnet2", 1950.0), ("resnet3", 1880.0))
    book.add("resnet", 2100.0)
    book.add("resnet", 2000.0)
    assert book.expected("resnet") == 2050.0 and book.measured("resnet")


def test_unpooled_keeps_the_median_over_measured_types() -> None:
    book = _book(("resnet34_cifar100_20e_3", 264.0), pooled=False)
    assert book.expected("resnet34_cifar100_20e_2") == 1950.0
    assert DurationBook().expected("anything") is None  # nothing measured


def test_a_new_family_member_moves_the_forecasts_version() -> None:
    fc = LearnedForecast(pooled_runs=True)
    fc.learn_duration("vgg", 3000.0)
    before = fc.version
    fc.learn_duration("resnet18_cifar100_20e_3", 204.0)
    assert fc.version > before
    assert fc.durations.expected("resnet18_cifar100_20e_1") == 204.0


def _request(key: str, label: str) -> TaskRequest:
    return TaskRequest(key=key, label=label, memory=MemoryNeed(4000, "test"))


def test_the_queue_ranks_a_short_familys_first_run_ahead_of_an_unknown_type() -> None:
    policy = CompletionTime(settings=CompletionSettings(pooled_runs=True))
    for kind, seconds in (*OTHERS, ("resnet34_cifar100_20e_3", 264.0)):
        policy.learn_duration(kind, seconds)
    rank = policy.ranker()
    assert rank is not None
    sibling = rank(_request("a", "resnet34_cifar100_20e_2[7]"), 0.0)
    stranger = rank(_request("b", "UNet[8]"), 0.0)
    assert sibling is not None and stranger is not None
    assert sibling == 264.0 and stranger == 1950.0


def test_a_type_that_only_ran_shared_is_at_most_as_long_as_its_shortest_shared_try() -> None:
    # issue 41: on t2 such types were priced at the median over the measured types (13x too long)
    for pooled in (False, True):
        book = _book(pooled=pooled)
        assert book.expected("resnet18_cifar100_20e_3") == 3000.0  # the median of the others
        changes = book.changes
        assert book.bound("resnet18_cifar100_20e_3", 450.0)
        assert book.changes > changes
        assert book.expected("resnet18_cifar100_20e_3") == 450.0
        assert not book.bound("resnet18_cifar100_20e_3", 600.0)  # a longer shared try bounds nothing new
        assert book.bound("resnet18_cifar100_20e_3", 400.0)
        assert book.expected("resnet18_cifar100_20e_3") == 400.0
        assert not book.measured("resnet18_cifar100_20e_3")
        # a bound above the estimate leaves it; a type's own run times stand over any bound
        book.bound("bigger", 99_999.0)
        assert book.expected("bigger") == 3000.0
        assert not book.bound("vgg", 10.0)
        assert book.expected("vgg") == 3000.0
    # before anything was measured alone, nothing is timed: the bound waits with the rest
    empty = DurationBook()
    empty.bound("x", 100.0)
    assert empty.expected("x") is None and len(empty) == 0


def test_on_a_mixed_fleet_the_bound_caps_the_model_it_ran_on() -> None:
    fc = LearnedForecast()
    fc.set_fleet(("A100-40GB", "T4"))
    for model in ("A100-40GB", "T4"):
        fc.learn_duration("vgg", 3000.0, model)
    before = fc.version
    fc.learn_bound("short", 500.0, "T4")
    assert fc.version > before
    assert fc.work_on("short", "T4") == 500.0
    # on a model it never ran on, the typical run there (a bound says nothing of another model's speed)
    assert fc.work_on("short", "A100-40GB") == 3000.0
    assert fc.fastest_run("short") == 500.0


def test_a_shared_tries_estimate_alone_prices_its_type_over_the_others_median() -> None:
    # issue 44: vgg, shared all along for 6,207 s, was priced at the median of the others (1,651 s)
    for pooled in (False, True):
        book = _book(pooled=pooled)
        assert book.bound("vgg_long", 9000.0, estimate=6000.0)  # longer than the others' 3,000 s
        assert book.expected("vgg_long") == 6000.0 and not book.measured("vgg_long")
        assert book.bound("vgg_long", 9500.0, estimate=7000.0)  # a longer bound, a new estimate: their median
        assert book.expected("vgg_long") == 6500.0
        assert book.bound("vgg_long", 5000.0)  # a bound below the estimates caps them
        assert book.expected("vgg_long") == 5000.0
        errors = len(book.calibration)
        book.bound("vgg", 100.0, estimate=50.0)  # its own run times stand; its estimate's error is counted
        assert book.expected("vgg") == 3000.0 and len(book.calibration) == errors + 1
    assert alone_from_shared(400.0, 1.6) == 250.0
    assert alone_from_shared(400.0, 0.8) == 400.0  # never longer than it ran shared
    assert alone_from_shared(400.0, None) is None
    empty = DurationBook()  # nothing measured alone anywhere: the estimate still times its type
    empty.bound("x", 100.0, estimate=80.0)
    assert empty.expected("x") == 80.0 and len(empty) == 0


def test_on_a_mixed_fleet_a_shared_tries_estimate_moves_to_other_models_by_their_ratio() -> None:
    fc = LearnedForecast()
    fc.set_fleet(("A100-40GB", "T4"))
    for kind, a100, t4 in (("a", 100.0, 400.0), ("b", 200.0, 800.0)):  # T4 runs 4x as long, learned
        fc.learn_duration(kind, a100, "A100-40GB")
        fc.learn_duration(kind, t4, "T4")
    before = fc.version
    fc.learn_bound("vgg", 9000.0, "A100-40GB", estimate=6000.0)
    assert fc.version > before
    assert fc.work_on("vgg", "A100-40GB") == 6000.0
    assert fc.work_on("vgg", "T4") == pytest.approx(24_000.0)  # not the T4's typical 600 s
    fc.learn_bound("vgg", 30_000.0, "T4", estimate=20_000.0)  # its own estimate there wins
    assert fc.work_on("vgg", "T4") == 20_000.0


def test_estimates_from_shared_tries_are_calibrated_by_how_far_off_they_came_out_on_measured_types() -> None:
    # issue 41: track the estimates' own error on this deployment's ended tries and use it
    book = _book()
    book.bound("lonely", 9000.0, estimate=6000.0)
    assert book.expected("lonely") == 6000.0  # no errors yet: as estimated
    # three measured types whose shared tries' estimates came out 2x their runs alone; one of them
    # measured before its shared try, two after (their first run alone counts their estimates)
    book.add("m0", 100.0)
    book.bound("m0", 500.0, estimate=200.0)
    for kind in ("m1", "m2"):
        book.bound(kind, 500.0, estimate=200.0)
        book.add(kind, 100.0)
    assert len(book.calibration) == 3 and book.calibration.factor() == pytest.approx(2.0)
    assert book.expected("lonely") == pytest.approx(3000.0)
    assert book.expected("m1") == 100.0  # a type's own run stands
    # bounded: estimates 10x too long move an estimate at most 3x
    for i in range(10):
        book.add(f"w{i}", 10.0)
        book.bound(f"w{i}", 500.0, estimate=100.0)
    assert book.calibration.factor() == 3.0


def test_on_a_mixed_fleet_the_calibration_takes_each_estimate_against_its_own_models_run() -> None:
    fc = LearnedForecast()
    fc.set_fleet(("A100-40GB", "T4"))
    for kind in ("a", "b", "c"):  # measured on the T4 at 400 s; their shared tries there estimated 800 s
        fc.learn_duration(kind, 100.0, "A100-40GB")
        fc.learn_duration(kind, 400.0, "T4")
        fc.learn_bound(kind, 2000.0, "T4", estimate=800.0)
    assert fc.durations.calibration.factor() == pytest.approx(2.0)  # against 400 s on the T4, not 250 s
    fc.learn_bound("vgg", 9000.0, "T4", estimate=6000.0)
    assert fc.work_on("vgg", "T4") == pytest.approx(3000.0)
    assert fc.work_on("vgg", "A100-40GB") == pytest.approx(750.0)  # the T4's 4x, learned
