"""Failure classification and the recovery planner.

CUDA out-of-memory is recognised by exception type and message signatures (PyTorch,
cuBLAS/cuSOLVER, NCCL, TensorFlow, JAX/XLA).  Exit codes carry no signal: an uncaught
exception exits 1 whatever it was, and a SIGKILL (exit 137, host OOM killer) is *not* a GPU OOM.

Whether a fenced try's OOM was its own cap (:attr:`FailureKind.CAP_OOM`) or a full GPU is decided
by figures where they are known: what the try held and asked for (the message's, else what the
caller measured) against the cap in force (PyTorch's own "... allowed;", else the try's fence as
its caller knows it: :class:`KnownFence`).  The message's words decide only where the figures do
not: PyTorch writes "allowed" in every OOM once a fraction is set, a full GPU's included, and an
MPS or driver limit refuses with the words of a full GPU.

The planner bounds retries and asks each next try for a GPU whose free memory covers what the
crashed try needed (what it held plus what it asked for, where its message says; else what it
reached), times a growth factor, plus headroom, away from the GPU it crashed on; the
last allowed try gets an idle GPU to itself.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from carma_airflow.core.fencing import PAST_CAP, IsolationMode
from carma_airflow.core.oom_figures import KnownFence, against_cap, needed_mib, oom_figures
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.core.units import format_mib


class FailureKind(enum.Enum):
    CUDA_OOM = "cuda-oom"
    CAP_OOM = "cap-oom"  # a fenced try asked past its own cap (core/fencing.py); the GPU may have been full too
    PROBABLE_OOM = "probable-oom"  # CUDNN_STATUS_NOT_INITIALIZED on a nearly full GPU
    KILLED = "killed"  # SIGKILL / exit 137 / host OOM killer
    GPU_FAULT = "gpu-fault"  # the device failed under the task (Xid 79 / 48 / 94 and the like)
    OTHER = "other"


_OOM_TYPES = frozenset(
    {
        "OutOfMemoryError",
        "torch.OutOfMemoryError",
        "torch.cuda.OutOfMemoryError",
        "ResourceExhaustedError",
        "tensorflow.errors.ResourceExhaustedError",
        "SimulatedCudaOOM",
    }
)
_OOM_PATTERNS = re.compile(
    "|".join(
        [
            r"CUDA out of memory",
            r"CUDA error: out of memory",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"CUSOLVER_STATUS_ALLOC_FAILED",
            r"Cuda failure '?out of memory",
            r"Failed to CUDA calloc",
            r"OOM when allocating tensor",
            r"CUDA_ERROR_OUT_OF_MEMORY",
            r"RESOURCE_EXHAUSTED: Out of memory",
            r"cudaErrorMemoryAllocation",
        ]
    ),
    re.IGNORECASE,
)
# under MPS a fatal fault of one client ends every client of that server (docs/isolation.md)
MPS_FAULT = re.compile(
    r"CUDA_ERROR_MPS_(?:CONNECTION_FAILED|RPC_FAILURE|SERVER_NOT_READY|CLIENT_TERMINATED)"
    r"|cudaErrorMps(?:ConnectionFailed|RpcFailure|ServerNotReady|ClientTerminated)|MPS client (?:failed|terminated)",
    re.IGNORECASE,
)
_GPU_FAULT = re.compile(
    "|".join(
        [
            MPS_FAULT.pattern,
            r"unspecified launch failure",
            r"fallen off the bus",
            r"GPU is lost",
            r"NVML_ERROR_GPU_IS_LOST",
            r"uncorrectable ECC error",
            r"ECC error encountered",
            r"cudaErrorECCUncorrectable",
            r"CUDA_ERROR_ECC_UNCORRECTABLE",
            r"\bXid\b",
        ]
    ),
    re.IGNORECASE,
)
_PROBABLE = re.compile(r"CUDNN_STATUS_NOT_INITIALIZED|CUDNN_STATUS_ALLOC_FAILED", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    evidence: str

    @property
    def is_oom(self) -> bool:
        return self.kind in OOM_KINDS

    @property
    def past_cap(self) -> bool:
        return self.kind is FailureKind.CAP_OOM


OOM_KINDS = frozenset({FailureKind.CUDA_OOM, FailureKind.CAP_OOM, FailureKind.PROBABLE_OOM})
# our own fences' words (the simulated GPUs' ledger): the fence itself says it refused
_OUR_PAST_CAP = re.compile(PAST_CAP, re.IGNORECASE)
# PyTorch's capped caching allocator ("... 9.50 GiB allowed; ..."): in every OOM once a fraction is set
_ALLOWED_WORDS = re.compile(r"\b[0-9.]+ [KMG]iB allowed;", re.IGNORECASE)


def asked_mib(message: str | None, held_mib: float | None = None) -> int | None:
    """What an OOM'd process held plus what it asked for, from its OOM message (None when the
    message does not say; ``held_mib``: what the caller measured it to hold, where the message
    does not say that): the memory a try needed at the point it crashed, on a full GPU as past
    its cap (core/oom_figures.py ``needed_mib``)."""
    return needed_mib(message, held_mib)


def oom_reached(peak_mib: int | None, message: str | None) -> int | None:
    """What a try that crashed with a CUDA OOM is known to have needed: the most it held (``peak_mib``,
    measured), or what it held plus what it asked for where its message says so, whichever is
    more.  What its next try is sized from (:func:`plan_recovery`): a try that held 5 GiB and asked
    13 GiB more on a full GPU needed 18 GiB, and a retry sized from the 5 GiB crashes the same way."""
    needed = needed_mib(message, peak_mib)
    if needed is None:
        return peak_mib
    return max(needed, peak_mib or 0)


def classify_failure(
    exc_type: str | None = None,
    message: str | None = None,
    exit_code: int | None = None,
    gpu_nearly_full: bool = False,
    *,
    fence: KnownFence | None = None,
    held_mib: int | None = None,
) -> Failure:
    """Classify one failed try from what the task process reported.  A CUDA OOM of a fenced try is
    told past its cap or on a full GPU by :func:`against_cap` where its figures decide (``fence``:
    the try's fence where the caller knows it; ``held_mib``: what its framework held), else by the
    message's words ("past its cap", PyTorch's "allowed")."""
    if exit_code in (137, -9):
        return Failure(FailureKind.KILLED, f"exit code {exit_code}: killed (SIGKILL, e.g. host OOM killer)")
    short_type = (exc_type or "").rsplit(".", 1)[-1]
    text = message or ""
    if exc_type in _OOM_TYPES or short_type in ("OutOfMemoryError", "ResourceExhaustedError"):
        return _oom(f"exception type {exc_type}", text, fence, held_mib)
    match = _OOM_PATTERNS.search(text)
    if match:
        return _oom(f"message contains {match.group(0)!r}", text, fence, held_mib)
    fault = _GPU_FAULT.search(text)
    if fault:
        return Failure(FailureKind.GPU_FAULT, f"message contains {fault.group(0)!r}")
    probable = _PROBABLE.search(text)
    if probable and gpu_nearly_full:
        return Failure(FailureKind.PROBABLE_OOM, f"{probable.group(0)} on a nearly full GPU")
    return Failure(FailureKind.OTHER, exc_type or (text[:80] if text else f"exit code {exit_code}"))


def _oom(seen: str, text: str, fence: KnownFence | None, held_mib: int | None) -> Failure:
    """A recognised CUDA OOM (``seen``: how), past its cap or not."""
    ours = _OUR_PAST_CAP.search(text)
    if ours:  # our own fence refused it and says so (the simulated GPUs' ledger, a leaf's limit)
        return Failure(FailureKind.CAP_OOM, f"{seen}, {PAST_CAP} ({ours.group(0)!r})")
    decided = against_cap(oom_figures(text), fence, held_mib)
    if decided is not None:
        past, evidence = decided
        return Failure(FailureKind.CAP_OOM if past else FailureKind.CUDA_OOM, f"{seen}, {evidence}")
    allowed = _ALLOWED_WORDS.search(text)
    if allowed:  # the figures do not say what it held: PyTorch's words, as they are
        return Failure(FailureKind.CAP_OOM, f"{seen}, {PAST_CAP} ({allowed.group(0)!r}; what it held not said)")
    known = fence.on(None) if fence is not None else None
    if fence is not None and known is not None and fence.mode is not IsolationMode.NONE:
        return Failure(
            FailureKind.CUDA_OOM,
            f"{seen}; told as a full GPU: the message does not say what it held against its {fence.mode.value} cap "
            f"of {known[0]} MiB",
        )
    return Failure(FailureKind.CUDA_OOM, seen)


@dataclass(frozen=True, slots=True)
class RecoverySettings:
    max_oom_retries: int = 2
    headroom_mib: int = 2048
    growth: float = 1.25  # the crashed try stopped at what was free; the real peak is higher
    exclusive_last: bool = True  # the last allowed try gets an idle GPU to itself
    round_mib: int = 256
    # the most a retry may ask for (the largest GPU less reserve and headroom): a retry that
    # would ask more asks that much with a GPU to itself (its cap is then the whole GPU), rather
    # than never fitting; None: unbounded
    max_request_mib: int | None = None


def max_retry_request_mib(largest_total_mib: int, reserve_mib: int, headroom_mib: int, round_mib: int = 256) -> int:
    """What an OOM retry may ask at most (:attr:`RecoverySettings.max_request_mib`): the largest GPU
    less the reserve and the headroom, rounded down to ``round_mib``; a larger request would never
    fit.  The executor (its monitor's largest GPU at start) and the simulator (its cluster's) bound
    alike."""
    return (largest_total_mib - reserve_mib - headroom_mib) // round_mib * round_mib


@dataclass(frozen=True, slots=True)
class RetryPlan:
    request: TaskRequest
    reason: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str


def tries_this_round(try_number: int, max_tries: int, policy_retries: int) -> int:
    """The tries of the current round, this one included: Airflow's ``max_tries`` starts at the
    task's ``retries`` (``policy_retries``: the author's plus the OOM retries) and is raised past
    it for tries that did not end by the task's doing (a clear: ``try_number + retries``; a reset
    try that never ran, executor/restart.py), so the round begins after ``max_tries - retries``."""
    return try_number - max(0, max_tries - policy_retries)


def author_retry_left(try_number: int, prior_oom_tries: int, author_retries: int) -> bool:
    """Whether a try that fails for any reason but a CUDA OOM may be retried.

    CUDA OOM tries have a budget of their own; every other failure (an exception, a kill by a
    signal, a refusal) counts against the author's ``retries``: the tries of this run that did not
    end in an OOM, this one included, must not be more than them.
    """
    return try_number - prior_oom_tries <= author_retries


def advised_memory_gib(reached_mib: int, settings: RecoverySettings = RecoverySettings()) -> int:
    """What to declare once a task's OOM retries are spent: the memory its last try reached,
    grown, in whole GiB (rounded up).  No headroom: the placer adds ``headroom_mib`` to a declared
    memory itself, so advice that included it would count it twice."""
    return math.ceil(reached_mib * settings.growth / 1024)


def oom_retry_left(prior_oom_tries: int, max_oom_retries: int) -> bool:
    """Whether a try that crashed with a CUDA OOM, after ``prior_oom_tries`` OOM tries of the same
    run, gets another try: the one place this budget is checked (retry policy, executor, planner)."""
    return prior_oom_tries < max_oom_retries


def oom_advice(tries: int, reached_mib: int | None, settings: RecoverySettings = RecoverySettings()) -> str:
    """What a task whose OOM retries are spent is told to declare (log, store, retry reason)."""
    if not reached_mib:
        return (
            f"CUDA OOM on {tries} tries; no more OOM retries. "
            "Declare more memory in executor_config (or exclusive=True)"
        )
    suggest = advised_memory_gib(reached_mib, settings)
    return (
        f"CUDA OOM on {tries} tries, the last at {reached_mib} MiB; no more OOM retries. "
        f"Declare executor_config={{'carma': {{'memory': '{suggest}GiB'}}}} (or exclusive=True, or a larger "
        f"gpu_model) for this task"
    )


class EndWay(enum.Enum):
    """The ways a try can end that its retry depends on (:class:`EndPlan`)."""

    CAP_OOM = "cap-oom"  # a CUDA OOM past its own cap
    GPU_OOM = "gpu-oom"  # a CUDA OOM on a full GPU (a probable OOM included)
    GPU_FAULT = "gpu-fault"  # the GPU failed under it
    KILLED = "killed"  # killed by a signal (by CARMA, the host's OOM killer, an operator)
    OTHER = "other"  # any other failure (an exception, a refusal)

    @classmethod
    def of(cls, kind: FailureKind) -> EndWay:
        if kind is FailureKind.CAP_OOM:
            return cls.CAP_OOM
        if kind in OOM_KINDS:
            return cls.GPU_OOM
        if kind is FailureKind.GPU_FAULT:
            return cls.GPU_FAULT
        return cls.KILLED if kind is FailureKind.KILLED else cls.OTHER


@dataclass(frozen=True, slots=True)
class Verdict:
    """Retry or fail, and the reason Airflow shows for it.  ``reason`` names the two things only
    the task knows where they go: ``{kind}`` (its failure's kind) and ``{evidence}`` (what the
    classifier saw).  ``advice_tries``: a CUDA OOM whose retries are spent, told what to declare
    from the memory it reached (:func:`oom_advice`, with that many tries)."""

    retry: bool
    reason: str
    advice_tries: int | None = None

    def words(self, failure: Failure, reached_mib: int | None = None) -> str:
        """The reason Airflow shows for ``failure`` (``reached_mib``: what the try reached, for advice)."""
        if self.advice_tries is not None:
            return oom_advice(self.advice_tries, reached_mib)
        return self.reason.replace("{kind}", failure.kind.value).replace("{evidence}", failure.evidence)


@dataclass(frozen=True, slots=True)
class EndPlan:
    """A try's retry, decided once before it runs for each way it can end (:func:`plan_try_end`).

    ``max_tries``: Airflow's, as it was planned with; None where the planner did not know it (the
    executor's workload does not carry it) and the round is counted from try 1.
    """

    try_number: int
    max_tries: int | None
    author_retries: int
    oom_retries: int
    prior_ooms: int  # CUDA OOM tries of the same run before this one
    verdicts: tuple[tuple[EndWay, Verdict], ...]

    def verdict(self, failure: Failure) -> Verdict:
        way = EndWay.of(failure.kind)
        return next(v for w, v in self.verdicts if w is way)

    def with_max_tries(self, max_tries: int | None) -> EndPlan:
        """The same plan counted with Airflow's ``max_tries`` where the try learned it (a clear or a
        restart's reset raised it past the task's retries); the OOM verdicts never change."""
        if max_tries is None or max_tries == self.counted_max_tries:
            return self
        return plan_try_end(self.try_number, max_tries, self.author_retries, self.oom_retries, self.prior_ooms)

    @property
    def counted_max_tries(self) -> int:
        return self.max_tries if self.max_tries is not None else self.author_retries + self.oom_retries

    def as_json(self) -> dict[str, Any]:
        return {
            "try_number": self.try_number,
            "max_tries": self.max_tries,
            "author_retries": self.author_retries,
            "oom_retries": self.oom_retries,
            "prior_ooms": self.prior_ooms,
            "verdicts": {
                w.value: {"retry": v.retry, "reason": v.reason, "advice_tries": v.advice_tries}
                for w, v in self.verdicts
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> EndPlan | None:
        """The plan ``data`` holds (:meth:`as_json`); None where it is not one."""
        if not isinstance(data, dict):
            return None
        numbers = [data.get(k) for k in ("try_number", "author_retries", "oom_retries", "prior_ooms")]
        max_tries, verdicts = data.get("max_tries"), data.get("verdicts")
        if not all(_count(n) for n in numbers) or not (max_tries is None or _count(max_tries)):
            return None
        if not isinstance(verdicts, dict):
            return None
        read: list[tuple[EndWay, Verdict]] = []
        for way in EndWay:
            v = verdicts.get(way.value)
            if not isinstance(v, dict) or not isinstance(v.get("retry"), bool) or not isinstance(v.get("reason"), str):
                return None
            advice = v.get("advice_tries")
            if advice is not None and not _count(advice):
                return None
            read.append((way, Verdict(v["retry"], v["reason"], advice)))
        try_number, author, oom, prior = (int(n) for n in numbers)  # type: ignore[arg-type]
        return cls(try_number, max_tries, author, oom, prior, tuple(read))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def plan_try_end(
    try_number: int, max_tries: int | None, author_retries: int, oom_retries: int, prior_ooms: int
) -> EndPlan:
    """The try's retry for each way it can end: the one place it is decided.  A CUDA OOM is retried
    while OOM tries remain (``prior_ooms``: OOM tries of the same run before this one, against
    ``oom_retries``); every other failure while the author's ``retries`` allow, counted over the
    tries of this round that did not end in an OOM (``max_tries``: Airflow's, None: the round
    counted from try 1).  The reasons are the words Airflow shows."""
    counted = max_tries if max_tries is not None else author_retries + oom_retries
    tries = tries_this_round(try_number, counted, author_retries + oom_retries)
    other_failures = tries - prior_ooms  # tries that failed for other reasons, this one included
    author_left = author_retry_left(tries, prior_ooms, author_retries)
    spent = Verdict(False, f"{{kind}} ({{evidence}}); the author's {author_retries} retries are spent")
    numbered = f"(author's retry {other_failures} of {author_retries})"
    if oom_retry_left(prior_ooms, oom_retries):
        oom_of = f"(OOM retry {prior_ooms + 1} of {oom_retries})"
        cap = Verdict(
            True, f"CUDA out of memory {PAST_CAP} ({{evidence}}); CARMA retries it with a larger cap {oom_of}"
        )
        full = Verdict(
            True, f"CUDA out of memory ({{evidence}}); CARMA retries it on a GPU with more free memory {oom_of}"
        )
    else:
        cap = full = Verdict(False, oom_advice(prior_ooms + 1, None), advice_tries=prior_ooms + 1)
    fault = Verdict(True, f"the GPU failed under the task ({{evidence}}); CARMA retries it on a healthy GPU {numbered}")
    other = Verdict(True, f"{{kind}}: author's retry {other_failures} of {author_retries}")
    verdicts = (
        (EndWay.CAP_OOM, cap),
        (EndWay.GPU_OOM, full),
        (EndWay.GPU_FAULT, fault if author_left else spent),
        (EndWay.KILLED, other if author_left else spent),
        (EndWay.OTHER, other if author_left else spent),
    )
    return EndPlan(try_number, max_tries, author_retries, oom_retries, prior_ooms, verdicts)


def plan_recovery(
    request: TaskRequest,
    failure: Failure,
    *,
    oom_retries_done: int,
    peak_mib: int | None,
    crashed_gpus: tuple[str, ...],
    now: float,
    settings: RecoverySettings = RecoverySettings(),
) -> RetryPlan | GiveUp:
    """Plan the next try after a failure, or give up with a message that says what to do."""
    if not failure.is_oom:
        return GiveUp(f"not a CUDA OOM ({failure.kind.value}: {failure.evidence}); the author's retries apply")
    reached = peak_mib if peak_mib is not None else request.memory.mib
    if not oom_retry_left(oom_retries_done, settings.max_oom_retries):
        return GiveUp(oom_advice(oom_retries_done + 1, reached, settings))
    # a try whose estimator gave up asked a sentinel, not memory (core/estimators.py GAVE_UP_MIB):
    # its retry is sized from what it reached alone, and bounded by the largest GPU like any other
    asked = 0 if request.memory.whole_gpu else request.memory.mib
    grown = max(asked, int(reached * settings.growth))
    grown = math.ceil(grown / settings.round_mib) * settings.round_mib
    last = oom_retries_done + 1 == settings.max_oom_retries
    exclusive = settings.exclusive_last and last
    bound = settings.max_request_mib
    if bound is not None and grown > bound >= asked:  # bounded by the GPU
        grown, exclusive = bound, True
    memory = MemoryNeed(grown, f"recovery (reached {format_mib(reached)} before OOM)")
    nxt = replace(
        request,
        key=f"{request.key.rsplit('#', 1)[0]}#{request.try_number + 1}",
        memory=memory,
        exclusive=request.exclusive or exclusive,
        try_number=request.try_number + 1,
        recovered=True,
        avoid_gpus=request.avoid_gpus | frozenset(crashed_gpus),
    )
    where = "an idle GPU of its own" if nxt.exclusive else f"a GPU with {format_mib(grown)} + headroom free"
    what = f"CUDA OOM {PAST_CAP}" if failure.past_cap else "CUDA OOM"
    return RetryPlan(
        nxt,
        f"{what} at {format_mib(reached)} ({failure.evidence}); retry {oom_retries_done + 1} "
        f"of {settings.max_oom_retries} on {where} (its cap grows with it), away from the GPU it crashed on",
    )


def paper_recovery(request: TaskRequest) -> RetryPlan:
    """The paper's recovery: relaunch at once, with priority, on an idle GPU, no bound."""
    nxt = replace(
        request,
        key=f"{request.key.rsplit('#', 1)[0]}#{request.try_number + 1}",
        exclusive=True,
        try_number=request.try_number + 1,
        recovered=True,
    )
    return RetryPlan(nxt, "paper recovery: relaunch on an idle GPU")


class RetryMode(enum.Enum):
    """How the next try after a CUDA OOM is planned (the simulator compares them)."""

    PLANNED = "planned"  # plan_recovery: bounded, more memory, away from the GPU it crashed on
    PAPER = "paper"  # paper_recovery: relaunch at once on an idle GPU
    BLIND = "blind"  # the same request again, bounded like PLANNED (static-K sharing's baseline)


# The paper sets no bound on its relaunches; a task whose peak no GPU offers would relaunch
# forever, so the paper's mode stops this many tries after the planned mode would.
PAPER_EXTRA_RETRIES = 8


def plan_retry(
    mode: RetryMode,
    request: TaskRequest,
    failure: Failure,
    *,
    oom_retries_done: int,
    peak_mib: int | None,
    crashed_gpus: tuple[str, ...],
    now: float,
    settings: RecoverySettings = RecoverySettings(),
) -> RetryPlan | GiveUp:
    """The next try after ``failure`` under ``mode``, or give up (``oom_retries_done``: OOM tries
    before this one)."""
    if mode is RetryMode.PLANNED:
        return plan_recovery(
            request,
            failure,
            oom_retries_done=oom_retries_done,
            peak_mib=peak_mib,
            crashed_gpus=crashed_gpus,
            now=now,
            settings=settings,
        )
    if not failure.is_oom:
        return GiveUp(f"not a CUDA OOM ({failure.kind.value}: {failure.evidence}); the author's retries apply")
    bound = settings.max_oom_retries + (PAPER_EXTRA_RETRIES if mode is RetryMode.PAPER else 0)
    if oom_retries_done >= bound:
        return GiveUp(f"CUDA OOM on {oom_retries_done + 1} tries; {mode.value} recovery stops after {bound} retries")
    if mode is RetryMode.PAPER:
        return paper_recovery(request)
    nxt = replace(
        request,
        key=f"{request.key.rsplit('#', 1)[0]}#{request.try_number + 1}",
        try_number=request.try_number + 1,
    )
    return RetryPlan(nxt, "blind recovery: the same request again")
