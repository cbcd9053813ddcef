"""What a simulated GPU says when a process cannot have the memory it asked for: a PyTorch-style
CUDA OOM, and the cap a fenced process is held to (core/fencing.py).  Used by the ledger."""

from __future__ import annotations

from typing import Any

from carma_airflow.core.fencing import PAST_CAP


class SimulatedCudaOOM(RuntimeError):  # noqa: N818 - the name failure classification knows
    """A simulated GPU had less free memory than a process asked for.

    The message follows PyTorch's ``torch.OutOfMemoryError`` ("CUDA out of memory. Tried to
    allocate ..."), so failure classification treats it as the real thing.  A process that hit
    its own cap reads as PyTorch's capped allocator does ("... allowed;") and says "past its cap".
    """

    def __init__(
        self,
        message: str,
        *,
        uuid: str = "",
        tried_mib: int = 0,
        free_mib: int = 0,
        total_mib: int = 0,
        held_mib: int = 0,
        cap_mib: int | None = None,
    ) -> None:
        super().__init__(message)
        self.cap_mib = cap_mib  # set when the process hit its own cap, not a full GPU
        self.uuid = uuid
        self.tried_mib = tried_mib
        self.free_mib = free_mib
        self.total_mib = total_mib
        self.held_mib = held_mib


def format_size(mib: float) -> str:
    """A size as PyTorch's OOM message writes it (``170.00 MiB``, ``40.00 GiB``, ``0 bytes``)."""
    size = mib * 1024.0 * 1024.0
    if size <= 1024:
        return f"{size:.0f} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.2f} KiB"
    if size < 1024**3:
        return f"{mib:.2f} MiB"
    return f"{mib / 1024:.2f} GiB"


def cuda_oom(
    gpu: dict[str, Any],
    uuid: str,
    ordinal: int | None,
    mib: int,
    free: int,
    total: int,
    held: int,
    ledger: object,
    cap: tuple[int, int] | None = None,
    *,
    label: str = "",
    held_by: str = "",
) -> SimulatedCudaOOM:
    """The error for a refused allocation; ``cap``: (limit, promise) when the process hit its cap,
    ``held_by``: what set that cap (``framework cap, fixed at the try's start``), ``label``: the try."""
    number = gpu["index"] if ordinal is None else ordinal
    fence = ""
    if cap is not None:  # as PyTorch's capped allocator words it, and why: the one stopped is named
        who = f"this try ({label})" if label else "this try"
        by = f"{held_by}; " if held_by else ""
        fence = (
            f"{format_size(cap[0])} allowed; {who} is {PAST_CAP} of {format_size(cap[0])} ({by}promised "
            f"{format_size(cap[1])}; the rest of the GPU is promised to its co-tenants, placed or not yet "
            "allocating). "
        )
    return SimulatedCudaOOM(
        f"CUDA out of memory. Tried to allocate {format_size(mib)}. GPU {number} has a total capacity "
        f"of {format_size(total)} of which {format_size(max(0, free))} is free. Including non-PyTorch "
        f"memory, this process has {format_size(held)} memory in use. {fence}"
        f"(simulated GPU {uuid}, {gpu['spec']['name']}, ledger {ledger})",
        uuid=uuid,
        tried_mib=mib,
        free_mib=max(0, free),
        total_mib=total,
        held_mib=held,
        cap_mib=None if cap is None else cap[0],
    )


__all__ = ["SimulatedCudaOOM", "cuda_oom", "format_size"]
