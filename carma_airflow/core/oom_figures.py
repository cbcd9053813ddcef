"""What a CUDA OOM message says in numbers, and whether they put a fenced try past its cap.

Used by the failure classification (core/recovery.py ``classify_failure``): whether a fenced try's
OOM was its own cap or a full GPU is decided by figures where they are known, what the try held
and asked for (the message's, else what the caller measured) against the cap in force (PyTorch's
own "... allowed;", else the try's fence as its caller knows it: :class:`KnownFence`).  PyTorch
writes "allowed" in every OOM once a fraction is set, a full GPU's included, and an MPS or driver
limit refuses with a full GPU's words: the words alone do not tell them apart.

The messages read (PyTorch 2.x's caching allocator)::

    CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 39.49 GiB of which
    1.06 GiB is free. Including non-PyTorch memory, this process has 6.70 GiB memory in use. 9.51 GiB
    allowed; Of the allocated memory 6.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by
    PyTorch but unallocated. ...

JAX/XLA's ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes``, TensorFlow's
``OOM when allocating tensor with shape[...] and type float`` and its BFC allocator's ``(rounded
to N)``, and the simulated GPUs' ledger (PyTorch's form, monitor/ledger_oom.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from carma_airflow.core.fencing import PAST_CAP, IsolationMode

_SIZE = r"([0-9]+(?:\.[0-9]+)?) (bytes|KiB|MiB|GiB)"
_TRIED = re.compile(rf"Tried to allocate {_SIZE}")
_IN_USE = re.compile(rf"this process has {_SIZE} memory in use")
_ALLOWED = re.compile(rf"\b{_SIZE} allowed;")
_FREE = re.compile(rf"of which {_SIZE} is free")
# PyTorch before 2.1: "(GPU 0; 39.59 GiB total capacity; 4.88 GiB already allocated; 1.20 GiB free;
# 5.00 GiB reserved in total by PyTorch)"
_ALREADY = re.compile(rf"{_SIZE} already allocated")
_RESERVED_TOTAL = re.compile(rf"{_SIZE} reserved in total by PyTorch")
_OLD_FREE = re.compile(rf"already allocated; {_SIZE} free")
_BY_PYTORCH = re.compile(
    rf"Of the allocated memory {_SIZE} is allocated by PyTorch,.*?and {_SIZE} is reserved by PyTorch but unallocated",
    re.DOTALL,
)
# JAX/XLA ("... while trying to allocate 17179869184 bytes", "(4294967296B)") and TensorFlow's BFC
# allocator ("... trying to allocate 1.00GiB (rounded to 1073741824)")
_ASKED_BYTES = re.compile(r"(?:trying to allocate|allocating) ([0-9]+) bytes|\(rounded to ([0-9]+)\)|\(([0-9]+)B\)")
_TF_SHAPE = re.compile(r"OOM when allocating tensor with shape\s*\[([0-9, ]*)\] and type (\w+)")
_TF_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2, "int32": 4}
_TF_BYTES.update({"int64": 8, "bool": 1, "complex64": 8, "complex128": 16})
_ORDINAL = re.compile(r"GPU ([0-9]+) has a total capacity|device ordinal ([0-9]+)|device:GPU:([0-9]+)")
_UNIT_MIB = {"bytes": 1 / (1024 * 1024), "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
_BYTE_MIB = 1 / (1024 * 1024)


def _mib(match: re.Match[str] | None, at: int = 1) -> float | None:
    """A size matched as ``<number> <unit>`` (groups ``at``, ``at + 1``) in MiB."""
    return None if match is None else float(match.group(at)) * _UNIT_MIB[match.group(at + 1)]


@dataclass(frozen=True, slots=True)
class OomFigures:
    """What an OOM message says in numbers (MiB; None where it does not say)."""

    asked: float | None = None  # the allocation refused
    process: float | None = None  # what the process held as the GPU counts it (PyTorch via NVML: context in)
    # what PyTorch's caching allocator held (allocated + reserved unallocated; before PyTorch 2.1, its
    # "reserved in total", else its "already allocated")
    reserved: float | None = None
    allowed: float | None = None  # PyTorch's limit then ("... allowed;"): a live cap's value at the OOM
    free: float | None = None  # what the GPU had free then
    gpu: int | None = None  # the GPU, as the process numbers its visible ones


def oom_figures(message: str | None) -> OomFigures:
    """The figures of a PyTorch, JAX/XLA, TensorFlow or simulated OOM message."""
    text = message or ""
    asked = _mib(_TRIED.search(text))
    if asked is None and (found := _ASKED_BYTES.search(text)) is not None:
        asked = int(next(g for g in found.groups() if g)) * _BYTE_MIB
    if asked is None and (shape := _TF_SHAPE.search(text)) is not None and shape.group(2) in _TF_BYTES:
        dims = [int(d) for d in shape.group(1).replace(" ", "").split(",") if d]
        asked = math.prod(dims) * _TF_BYTES[shape.group(2)] * _BYTE_MIB
    pytorch = _BY_PYTORCH.search(text)
    reserved = None if pytorch is None else (_mib(pytorch) or 0.0) + (_mib(pytorch, 3) or 0.0)
    if reserved is None:  # PyTorch before 2.1: what its caching allocator held, else what it had allocated
        reserved = _mib(_RESERVED_TOTAL.search(text))
        if reserved is None:
            reserved = _mib(_ALREADY.search(text))
    free = _mib(_FREE.search(text))
    if free is None:
        free = _mib(_OLD_FREE.search(text))
    ordinal = _ORDINAL.search(text)
    return OomFigures(
        asked=asked,
        process=_mib(_IN_USE.search(text)),
        reserved=reserved,
        allowed=_mib(_ALLOWED.search(text)),
        free=free,
        gpu=None if ordinal is None else int(next(g for g in ordinal.groups() if g)),
    )


@dataclass(frozen=True, slots=True)
class KnownFence:
    """The fence a failed try ran under, where its caller knows it (the try's own environment and
    live cap file, taskrun/cap_oom.py; the GPU kit).  Per GPU, in the try's CUDA_VISIBLE_DEVICES
    order: ``cap_mib``, what the mechanism was set to (a framework's or an MPS client's: the cap
    less the CUDA context, which its allocator does not see; a driver's: the cap itself, context
    within), and ``context_mib``, the CUDA context counted (empty: none)."""

    mode: IsolationMode
    cap_mib: tuple[int, ...]
    context_mib: tuple[int, ...] = ()

    def on(self, gpu: int | None) -> tuple[int, int] | None:
        """(cap, context) on the try's GPU ``gpu``; with no GPU named, the one cap all its GPUs
        share (None where they differ, or where the try is unfenced)."""
        if self.mode is IsolationMode.NONE or not self.cap_mib:
            return None
        contexts = self.context_mib if len(self.context_mib) == len(self.cap_mib) else (0,) * len(self.cap_mib)
        if gpu is not None and 0 <= gpu < len(self.cap_mib):
            return self.cap_mib[gpu], contexts[gpu]
        if len(set(self.cap_mib)) == 1:
            return self.cap_mib[0], max(contexts)
        return None


def _n(mib: float) -> str:
    return f"{math.ceil(mib)} MiB"


def against_cap(
    figures: OomFigures, fence: KnownFence | None = None, held_mib: int | None = None
) -> tuple[bool, str] | None:
    """Whether an OOM was the try's own cap or a full GPU, from figures: what it held and asked
    for against the cap in force.  ``held_mib``: what the caller measured the try's framework
    allocator to hold (torch/TensorFlow/JAX counters), used where the message does not say.
    ``(past its cap, the evidence)``; None where the figures do not decide (no cap known, nothing
    asked said)."""
    asked = figures.asked
    if asked is None:
        return None
    known = fence.on(figures.gpu) if fence is not None else None
    mode = fence.mode if fence is not None and known is not None else None
    context = known[1] if known is not None else 0
    if mode is IsolationMode.DRIVER:  # the cgroup counts all the process holds, context in
        assert known is not None
        limit, what = float(known[0]), "its driver limit"
        allocator = figures.reserved if figures.reserved is not None else held_mib
        held = figures.process if figures.process is not None else None
        if held is None and allocator is not None:
            held = allocator + context
    else:  # PyTorch's fraction in force, else the framework's (or MPS client's) limit
        if figures.allowed is not None:
            limit, what = figures.allowed, "PyTorch's cap at the OOM"
        elif known is not None:
            limit, what = float(known[0]), f"its {mode.value if mode else 'framework'} cap"
        else:
            return None
        held = figures.reserved if figures.reserved is not None else held_mib
        if held is None and figures.process is not None:
            held = max(0.0, figures.process - context)
    free = f"; {_n(figures.free)} free on the GPU" if figures.free is not None else ""
    if (held or 0.0) + asked > limit:
        holding = f"held {_n(held)} and " if held is not None else ""
        return True, f"{PAST_CAP}: {holding}asked {_n(asked)}, past {what} ({_n(limit)}){free}"
    if held is None:
        return None  # what it asked fits the cap: what it held decides, and nothing says it
    if mode in (IsolationMode.DRIVER, IsolationMode.MPS) and figures.free is not None and figures.free >= asked:
        # the GPU had room, the limit outside the allocator (all the try's processes, or MPS's
        # pinned limit beneath a re-set cap) refused it: the fence
        return True, (
            f"{PAST_CAP}: {what} ({_n(limit)}) refused {_n(asked)} while the GPU had {_n(figures.free)} free "
            f"(this process held {_n(held)}; the limit counts more than it)"
        )
    return False, f"held {_n(held)} and asked {_n(asked)}, within {what} ({_n(limit)}): the GPU was full{free}"


def held_of(figures: OomFigures, held_mib: float | None = None) -> float | None:
    """What the crashed process held when its allocation was refused: as the GPU counts it (the
    message's "this process has"), else as its framework's allocator counts it, else what the
    caller measured (``held_mib``: the simulated ledger's or the framework's own peak)."""
    for held in (figures.process, figures.reserved, held_mib):
        if held is not None:
            return held
    return None


def needed_mib(message: str | None, held_mib: float | None = None) -> int | None:
    """What a try needed at the point its allocation was refused: what it held plus what it asked
    for (None where the message does not say what it asked, or nothing says what it held).  A
    crash on a full GPU that says so says the least the try's next reservation must be: what it
    held alone would size the retry to crash the same way (issue 41)."""
    figures = oom_figures(message)
    held = held_of(figures, held_mib)
    if figures.asked is None or held is None:
        return None
    return math.ceil(figures.asked + held)


__all__ = ["KnownFence", "OomFigures", "against_cap", "held_of", "needed_mib", "oom_figures"]
