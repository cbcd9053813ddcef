"""Validation of the environment CarmaExecutor gives a task process.

Every value that reaches a task's environment comes from the executor (GPU UUIDs from the
monitor, a placement summary, paths from the configuration) or, through a ConfigError message,
from a DAG.  :func:`check_task_env` refuses anything that could not be a plain variable, could
smuggle a second line, or could widen the GPUs a task sees.  Pure: no I/O, no os.environ.
"""

from __future__ import annotations

import re

from carma_airflow.core.errors import ConfigError, brief

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# an index, a GPU UUID (GPU-8932f937-..., the simulated GPU-SIM-0000) or a MIG device
# (MIG-<uuid> since driver R470, MIG-GPU-<uuid>/<gi>/<ci> before it)
_DEVICE = re.compile(r"[0-9]{1,4}|GPU-[0-9A-Za-z][0-9A-Za-z-]{0,127}|MIG-[0-9A-Za-z][0-9A-Za-z/-]{0,127}", re.ASCII)
_FORBIDDEN = ("\x00", "\n", "\r")
MAX_VALUE_CHARS = 32_768


def check_cuda_visible_devices(value: str) -> str:
    """``value`` if it is empty or a comma list of distinct GPU indices / GPU-... / MIG-... UUIDs."""
    if value == "":
        return value
    devices = value.split(",")
    for device in devices:
        if _DEVICE.fullmatch(device) is None:
            raise ConfigError(
                f"CUDA_VISIBLE_DEVICES item {brief(device)} is not a GPU index or UUID; "
                "write a comma list such as GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,1 or nothing"
            )
    if len(set(devices)) != len(devices):
        raise ConfigError(f"CUDA_VISIBLE_DEVICES {brief(value)} names a GPU twice; write each GPU once")
    return value


def check_task_env(env: dict[str, str]) -> dict[str, str]:
    """Return ``env`` (a copy) if every entry is safe to put in a task's environment.

    Raises ConfigError if a key is not an environment variable name (``[A-Za-z_][A-Za-z0-9_]*``),
    a key or value is not a str, a value holds NUL, CR or LF, is not encodable for the OS or is
    longer than 32 KiB, or ``CUDA_VISIBLE_DEVICES`` is not a comma list of GPU indices / UUIDs.
    """
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or _NAME.fullmatch(key) is None:
            raise ConfigError(f"task environment name {brief(key)} is not a variable name; write e.g. CARMA_PLACEMENT")
        if not isinstance(value, str):
            raise ConfigError(f"task environment value of {key} must be a str, got {type(value).__name__}")
        bad = [c for c in _FORBIDDEN if c in value]
        if bad:
            raise ConfigError(f"task environment value of {key} holds {brief(bad[0])}; write one line without NUL")
        if len(value) > MAX_VALUE_CHARS:
            raise ConfigError(f"task environment value of {key} is {len(value)} characters; keep it under 32 KiB")
        try:
            value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise ConfigError(f"task environment value of {key} is not encodable: {brief(value)}") from None
        if key == "CUDA_VISIBLE_DEVICES":
            check_cuda_visible_devices(value)
        out[key] = value
    return out
