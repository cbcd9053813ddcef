"""Reasons and summaries shortened by rule (core/shorten.py): whole clauses, never mid-sentence."""

from __future__ import annotations

from carma_airflow.core.shorten import ELLIPSIS, whole_clauses

TEXT = (
    "never fits: needs 100.0 GiB per GPU but the largest GPU offers 40.0 GiB (A100-40GB); "
    "declare less memory or add a larger GPU; see carma why. Another sentence here."
)


def test_a_text_that_fits_is_whole_on_one_line() -> None:
    assert whole_clauses("a;\n  b", 10) == "a; b"
    assert whole_clauses(TEXT, 400) == TEXT


def test_a_long_text_keeps_whole_clauses_and_counts_the_rest() -> None:
    short = whole_clauses(TEXT, 120)
    head = "never fits: needs 100.0 GiB per GPU but the largest GPU offers 40.0 GiB (A100-40GB)"
    assert short == f"{head} (+3 more clauses)"
    assert len(whole_clauses(TEXT, 160)) <= 160 and whole_clauses(TEXT, 160).endswith("see carma why (+1 more clause)")


def test_a_first_clause_too_long_alone_ends_on_a_whole_word() -> None:
    short = whole_clauses(TEXT, 40)
    assert short == "never fits: needs 100.0 GiB per GPU" + ELLIPSIS and len(short) <= 40


def test_every_cut_is_within_the_limit_and_between_words() -> None:
    for most in range(len("never") + len(ELLIPSIS), len(TEXT) + 5):  # from the first word on
        short = whole_clauses(TEXT, most)
        assert len(short) <= most, (most, short)
        body = short.split(" (+")[0].removesuffix(ELLIPSIS)
        assert TEXT.startswith(body), (most, short)  # what is kept is the text's own beginning
        assert len(body) == len(TEXT) or TEXT[len(body)] in " ;.:,", (most, short)  # cut between words
