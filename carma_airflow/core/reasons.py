"""The reason texts of placement decisions: what ``carma why``, the log and the GPU page show.

Every rejected GPU's verdict carries the filter's :class:`~carma_airflow.core.filtering.Rejection`
(its numbers) and the text rendered from it.  A scan records light tuples (GPU, reason, pool);
the rejections are made here, only for decisions that keep them.  A waiting decision's headline
names what blocks (:func:`waiting_summary`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import attrgetter

from carma_airflow.core.decision import GpuVerdict, Reason
from carma_airflow.core.engine_filters import HELD, KEPT, KEPT_FASTER, NEEDS_IDLE, MemoryFit
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Rejection
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.units import format_mib


def verdict(facts: GpuFacts, reason: Reason | None, detail: str) -> GpuVerdict:
    st = facts.state
    return GpuVerdict(st.uuid, st.index, st.spec.name, reason, detail)


def rejected(facts: GpuFacts, rejection: Rejection, text: str | None = None) -> GpuVerdict:
    """The verdict of a GPU a filter rejected: its reason, the text rendered from its numbers
    (``text``: rendered already), and the rejection itself."""
    st = facts.state
    detail = rejection.text() if text is None else text
    return GpuVerdict(st.uuid, st.index, st.spec.name, rejection.reason, detail, rejection)


def describe(facts: GpuFacts, tenants: Sequence[str]) -> str:
    co = ", ".join(tenants) if tenants else "none"
    return f"{format_mib(facts.usable_free_mib)} free, SM activity {facts.smact:.2f}, co-tenants: {co}"


def scan_rejection(
    f: GpuFacts,
    reason: Reason,
    shared: bool,
    request: TaskRequest,
    headroom_mib: int,
    notes: dict[str, Rejection] | None,
) -> Rejection:
    """The rejection behind one light record of a scan: a filter's own (``notes``, by GPU), else
    the engine filter's for ``reason`` (:mod:`carma_airflow.core.engine_filters`)."""
    note = notes.get(f.uuid) if notes else None
    if note is not None:
        return note
    if reason is Reason.RESERVED:
        return HELD.rejection()
    if reason is Reason.KEPT:
        return KEPT.rejection()
    if reason is Reason.KEPT_FASTER:
        return KEPT_FASTER.rejection()
    if reason is Reason.BUSY:
        return NEEDS_IDLE.rejection(f)
    if reason is Reason.MEMORY:
        need = request.memory.filter_mib(headroom_mib) if shared else request.memory.mib
        return MemoryFit.rejection(f, need, shared)
    return Rejection.said("scan", reason, reason.value)


def scan_verdicts(
    scanned: Sequence[tuple[GpuFacts, Reason, bool]],
    request: TaskRequest,
    headroom_mib: int,
    notes: dict[str, Rejection] | None = None,
) -> tuple[GpuVerdict, ...]:
    """Turn the light records of a scan into verdicts with their rejections and texts (``notes``:
    the rejections of the policy's own filters and refusals, by GPU)."""
    return tuple(
        rejected(f, scan_rejection(f, reason, shared, request, headroom_mib, notes)) for f, reason, shared in scanned
    )


# the headline of a waiting decision where one reason holds every GPU back: the cause, by name
_EVERY_GPU: dict[Reason, str] = {
    Reason.UNHEALTHY: "every GPU is quarantined",
    Reason.STALE: "every GPU has stale telemetry",
    Reason.LOCKED: "every GPU was placed on moments ago",
    Reason.MEMORY: "no GPU with {need} free",
    Reason.RISK: "every GPU is too busy to share (high-risk)",
    Reason.INTERFERENCE: "sharing any GPU is predicted not to pay (interference)",
    Reason.BUSY: "no idle GPU",
    Reason.EXCLUSIVE_TENANT: "every GPU is held by an exclusive task",
    Reason.TENANT_CAP: "every GPU is at its tenant cap",
    Reason.RESERVED: "every GPU is held for a task past its starvation bound",
    Reason.KEPT: "every GPU that fits is kept for waiting tasks that need its size",
    Reason.KEPT_FASTER: "every GPU that fits is kept for a faster GPU model or for tasks that gain more from it",
}
_REASON_ORDER = {r: i for i, r in enumerate(Reason)}


def waiting_summary(
    rejected: Sequence[GpuVerdict],
    total: int,
    *,
    n: int,
    idle_only: bool,
    need: str,
    headlines: dict[Reason, str] | None = None,
) -> str:
    """The text of a waiting decision (what ``carma why``, the log and the GPU page show).

    The headline names what blocks: the one reason when it holds back every GPU ("every GPU is
    at its tenant cap", "no GPU with 6.0 GiB free" only when memory is what every GPU lacks),
    else that no GPU can take the task now.  The parenthesis counts the reasons, the most
    common first with its share of the ``total`` GPUs: ``(7 of 8 GPUs tenant-cap, 1 memory)``.
    The headline's wording depends on the kinds of reasons only, not on their counts: the
    executor writes a waiting task's reason again when its headline changes.
    """
    counts: dict[Reason, int] = {}
    for v in rejected:
        if v.reason is not None:
            counts[v.reason] = counts.get(v.reason, 0) + 1
    return summary_of_counts(counts, total, n=n, idle_only=idle_only, need=need, headlines=headlines)


def count_reasons(verdicts: Sequence[GpuVerdict], into: dict[Reason, int]) -> dict[Reason, int]:
    for reason, count in Counter(map(_REASON_OF, verdicts)).items():
        if reason is not None:
            into[reason] = into.get(reason, 0) + count
    return into


def summary_of_counts(
    counts: dict[Reason, int],
    total: int,
    *,
    n: int,
    idle_only: bool,
    need: str,
    headlines: dict[Reason, str] | None = None,
) -> str:
    """:func:`waiting_summary` from the reasons counted already (a pass counts the GPUs no
    request can use once, not once per waiting decision).  ``headlines``: the request's own
    filters' headlines by reason (:meth:`~carma_airflow.core.filtering.Filter.headline`)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _REASON_ORDER[kv[0]]))
    if len(ranked) == 1 and ranked[0][1] >= total:
        reason = ranked[0][0]
        if reason is Reason.MEMORY and n > 1:
            lack = f"no host with {n} GPUs with {need} free"
        elif reason is Reason.BUSY and n > 1:
            lack = f"no host with {n} GPUs idle"
        elif headlines and reason in headlines:
            lack = headlines[reason]
        else:
            lack = _EVERY_GPU.get(reason, f"every GPU is refused ({reason.value})").format(need=need)
    elif n == 1:
        lack = "no usable idle GPU" if idle_only else f"no GPU can take {need} now"
    else:
        lack = (
            f"no host with {n} GPUs idle and usable" if idle_only else f"no host with {n} GPUs that can take {need} now"
        )
    if not ranked:
        return f"waiting: {lack} (too few candidates on one host)"
    return f"waiting: {lack} ({_count_parts(ranked, total)})"


def _count_parts(ranked: Sequence[tuple[Reason, int]], total: int) -> str:
    (top, k), rest = ranked[0], ranked[1:]
    parts = [f"{k} of {total} GPU{'s' if total != 1 else ''} {top.value}"] + [f"{c} {r.value}" for r, c in rest]
    return ", ".join(parts)


def waiting_by_choice(counts: dict[Reason, int], total: int, *, n: int, need: str, wait: str) -> str:
    """The text of a try that some GPU set could take now but that is predicted to finish
    sooner, slowing nobody, by waiting for one to drain (the completion-time policy): the
    headline, then what waiting costs and the reasons counted, as :func:`summary_of_counts`."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _REASON_ORDER[kv[0]]))
    where = "a GPU" if n == 1 else f"{n} GPUs"
    head = f"waiting: sharing {where} now is predicted to cost more than waiting for {where} to drain"
    if not ranked:
        return f"{head} ({wait})"
    return f"{head} ({wait}; {_count_parts(ranked, total)})"


_REASON_OF = attrgetter("reason")

__all__ = [
    "count_reasons",
    "describe",
    "rejected",
    "scan_rejection",
    "scan_verdicts",
    "summary_of_counts",
    "verdict",
    "waiting_by_choice",
    "waiting_summary",
]
