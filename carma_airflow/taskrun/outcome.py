"""What a task process tells the executor about its try: a small JSON file per try.

The task process (through the listener) writes it; the executor reads it when the process has
ended.  Only the executor writes the store.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

RESULT_ENV = "CARMA_RESULT_FILE"


@dataclass(frozen=True, slots=True)
class TryResult:
    state: str  # success | failed | up_for_retry
    failure_kind: str | None = None  # cuda-oom | probable-oom | killed | other
    exc_type: str | None = None
    message: str | None = None
    peak_mib: int | None = None

    @property
    def is_oom(self) -> bool:
        return self.failure_kind in ("cuda-oom", "probable-oom")


def write_result(result: TryResult, path: str | os.PathLike[str] | None = None) -> Path | None:
    """Atomically write the result where the executor asked (no-op outside CarmaExecutor)."""
    target = path or os.environ.get(RESULT_ENV)
    if not target:
        return None
    out = Path(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".result-")
    with os.fdopen(fd, "w") as fh:
        json.dump(asdict(result), fh)
    os.replace(tmp, out)
    return out


def read_result(path: Path) -> TryResult | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("state"), str):
        return None

    def text(name: str) -> str | None:
        value = data.get(name)
        return value if isinstance(value, str) else None

    peak = data.get("peak_mib")
    return TryResult(
        state=data["state"],
        failure_kind=text("failure_kind"),
        exc_type=text("exc_type"),
        message=text("message"),
        peak_mib=int(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else None,
    )
