"""Memory quantities: parse_mib and format_mib."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carma_airflow.core import ConfigError, format_mib, parse_mib


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("12GiB", 12288),
        ("12 GiB", 12288),
        ("12gib", 12288),
        ("12G", 12288),
        ("800MiB", 800),
        ("800 mib", 800),
        ("800M", 800),
        ("800", 800),
        ("  800  ", 800),
        ("1.5GB", 1536),
        ("1.5 GB", 1536),
        ("1TiB", 1024 * 1024),
        ("0.5GiB", 512),
    ],
)
def test_parse_mib_strings(text: str, mib: int) -> None:
    assert parse_mib(text) == mib


@pytest.mark.parametrize("value", [1, 800, 12288, 10**7])
def test_parse_mib_int_is_mib(value: int) -> None:
    assert parse_mib(value) == value


@pytest.mark.parametrize("bad", ["", "abc", "12 parsecs", "GiB", "-5", "-5GiB", "1.2.3GiB", "12 Gi B", "1e3", "0x10"])
def test_parse_mib_unreadable_strings(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_mib(bad)
    message = str(info.value)
    assert "12GiB" in message and "800MiB" in message  # says what to write


@pytest.mark.parametrize("bad", [0, -1, -12288])
def test_parse_mib_non_positive_ints(bad: int) -> None:
    with pytest.raises(ConfigError, match="positive") as info:
        parse_mib(bad)
    assert "12GiB" in str(info.value)


@pytest.mark.parametrize("bad", ["0", "0MiB", "0.4MiB", "0.0001GiB"])
def test_parse_mib_below_one_mib(bad: str) -> None:
    with pytest.raises(ConfigError, match="below 1 MiB"):
        parse_mib(bad)


@pytest.mark.parametrize("bad", [True, False])
def test_parse_mib_rejects_bools(bad: bool) -> None:
    with pytest.raises(ConfigError, match="bool") as info:
        parse_mib(bad)
    assert "12GiB" in str(info.value)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_mib("lots")


@pytest.mark.parametrize(
    ("mib", "text"),
    [(800, "800 MiB"), (1023, "1023 MiB"), (1024, "1.0 GiB"), (12288, "12.0 GiB"), (31949, "31.2 GiB")],
)
def test_format_mib(mib: int, text: str) -> None:
    assert format_mib(mib) == text


@given(st.integers(min_value=1, max_value=10**9))
def test_round_trip_mib(n: int) -> None:
    assert parse_mib(n) == n
    assert parse_mib(str(n)) == n
    assert parse_mib(f"{n}MiB") == n
    assert parse_mib(f"{n} mb") == n


@given(st.integers(min_value=1, max_value=10**6))
def test_round_trip_gib(n: int) -> None:
    assert parse_mib(f"{n}GiB") == n * 1024
    assert parse_mib(f"{n}gb") == n * 1024


@given(st.integers(min_value=1, max_value=10**6))
def test_format_then_parse_is_close(n: int) -> None:
    # format_mib keeps one decimal of GiB: parsing it back is within 0.05 GiB
    assert abs(parse_mib(format_mib(n).replace(" ", "")) - n) <= 52


@given(st.text(max_size=30))
def test_parse_mib_never_crashes_on_text(text: str) -> None:
    try:
        mib = parse_mib(text)
    except ConfigError:
        return
    assert isinstance(mib, int)
    assert mib >= 1


@given(st.from_regex(r"\A\s*[0-9]{1,15}(\.[0-9]{1,20})?\s*(|m|mib|g|GiB|TB|t)\s*\Z"))
def test_parse_mib_never_crashes_on_number_like_text(text: str) -> None:
    try:
        mib = parse_mib(text)
    except ConfigError:
        return
    assert mib >= 1


@pytest.mark.parametrize("text", ["9" * 400, "1" * 320 + "GiB"])
def test_parse_mib_huge_number_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_mib(text)
