"""Memory strings (parse_mib) and GPU lists (parse_gpu_list) under hostile input."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from carma_airflow.core.errors import ConfigError, UnknownGpuSpecError
from carma_airflow.core.gpu import GPU_CATALOGUE, MAX_GPUS, parse_gpu_list
from carma_airflow.core.units import MAX_MIB, parse_mib

FUZZ = settings.get_profile("carma-fuzz")
UNITS = {
    "": 1,
    "m": 1,
    "MB": 1,
    "mi": 1,
    "MiB": 1,
    "g": 1024,
    "GB": 1024,
    "gi": 1024,
    "GiB": 1024,
    "t": 2**20,
    "TiB": 2**20,
}
SPEC_NAMES = [spec.name for spec in GPU_CATALOGUE.values()]

anything = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**128), max_value=2**128)
    | st.floats()
    | st.text()
    | st.text(alphabet="0123456789. \t\n\x00eEgGiImMbBtTkK\u0663\u00a0-+", max_size=30)
    | st.binary(max_size=8)
    | st.lists(st.integers(), max_size=2)
)


def one_line(message: str) -> None:
    assert message and len(message.splitlines()) == 1 and "\x00" not in message
    assert len(message) < 400


@settings(FUZZ)
@given(anything)
def test_parse_mib_returns_a_bounded_size_or_a_config_error(value: Any) -> None:
    try:
        mib = parse_mib(value)
    except ConfigError as exc:
        one_line(str(exc))
        assert "write" in str(exc) or "not a" in str(exc)
    else:
        assert type(mib) is int and 1 <= mib <= MAX_MIB
        assert isinstance(value, (int, str)) and not isinstance(value, bool)


@settings(FUZZ)
@given(st.integers(min_value=0, max_value=2**62), st.sampled_from(sorted(UNITS)), st.sampled_from(["", " ", "  "]))
def test_parse_mib_agrees_with_the_unit_table(n: int, unit: str, space: str) -> None:
    expected = n * UNITS[unit]
    try:
        mib = parse_mib(f"{space}{n}{space}{unit}{space}")
    except ConfigError:
        assert not 1 <= expected <= MAX_MIB
    else:
        assert mib == expected


@settings(FUZZ)
@given(st.text() | st.text(alphabet="0123456789xX,- .AHLTV", max_size=40))
def test_parse_gpu_list_returns_known_specs_or_an_error(text: str) -> None:
    try:
        specs = parse_gpu_list(text)
    except UnknownGpuSpecError as exc:
        one_line(str(exc))
    else:
        assert 1 <= len(specs) <= MAX_GPUS
        assert all(GPU_CATALOGUE[s.name.lower()] is s for s in specs)


@settings(FUZZ)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=40_000) | st.integers(min_value=0, max_value=10**12) | st.none(),
            st.sampled_from(SPEC_NAMES),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_parse_gpu_list_counts_every_part(parts: list[tuple[int | None, str]]) -> None:
    text = ",".join(name if n is None else f"{n}x{name}" for n, name in parts)
    counts = [1 if n is None else n for n, _ in parts]
    try:
        specs = parse_gpu_list(text)
    except UnknownGpuSpecError as exc:
        assert min(counts) < 1 or sum(counts) > MAX_GPUS, exc
    else:
        assert [s.name for s in specs] == [name for (_, name), c in zip(parts, counts, strict=True) for _ in range(c)]


@settings(FUZZ)
@given(st.integers(min_value=10, max_value=6000))
def test_parse_gpu_list_refuses_very_long_counts(digits: int) -> None:
    try:
        parse_gpu_list("9" * digits + "xA100-40GB")
    except UnknownGpuSpecError as exc:
        one_line(str(exc))
    else:
        raise AssertionError(f"a count with {digits} digits was accepted")
