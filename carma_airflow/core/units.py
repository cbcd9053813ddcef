"""Memory quantities.  Everything inside carma-airflow is an int of MiB."""

from __future__ import annotations

import math
import re

from carma_airflow.core.errors import ConfigError, brief

_UNITS = {
    "": 1.0,
    "m": 1.0,
    "mb": 1.0,
    "mi": 1.0,
    "mib": 1.0,
    "g": 1024.0,
    "gb": 1024.0,
    "gi": 1024.0,
    "gib": 1024.0,
    "t": 1024.0 * 1024.0,
    "tb": 1024.0 * 1024.0,
    "ti": 1024.0 * 1024.0,
    "tib": 1024.0 * 1024.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
MAX_MIB = 2**31 - 1  # 2 PiB: far above any GPU, and it fits the store's 32-bit columns (PostgreSQL INTEGER)


def parse_mib(value: int | str) -> int:
    """Parse ``12GiB``, ``800MiB``, ``1.5 GB`` or an int of MiB into MiB.

    GB/GiB are both taken as 1024 MiB: GPU memory is sold in binary units.
    """
    if isinstance(value, bool):
        raise ConfigError("memory must be a size such as '12GiB', '800MiB' or an int of MiB, not a bool")
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"memory must be positive, got {brief(value)}; write e.g. 12288 or '12GiB'")
        if value > MAX_MIB:
            raise ConfigError(f"memory {brief(value)} MiB is absurdly large; write e.g. 81920 or '80GiB'")
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"memory must be a size such as '12GiB', '800MiB' or an int of MiB, not a {type(value).__name__}"
        )
    match = _PATTERN.match(value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"cannot read memory size {brief(value)}; write e.g. '12GiB', '800MiB' or an int of MiB")
    mib = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(mib) or mib > MAX_MIB:
        raise ConfigError(f"memory size {brief(value)} is absurdly large; write e.g. '80GiB'")
    if mib < 1:
        raise ConfigError(f"memory size {brief(value)} is below 1 MiB; write e.g. '800MiB'")
    return round(mib)


def format_mib(mib: float) -> str:
    """Human form: ``31.2 GiB`` above 1 GiB, else ``800 MiB``."""
    if abs(mib) >= 1024:
        return f"{mib / 1024:.1f} GiB"
    return f"{mib:.0f} MiB"
