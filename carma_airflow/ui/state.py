"""What the GPU page shows, assembled from the store: one JSON-ready dict.

The api-server is not the scheduler: it cannot see the executor's memory.  Everything here comes
from the bookkeeping store: the executors' live snapshots (``executor:<executor id>``, written
every few seconds, one per running executor: live_snapshots.py; two on one host are merged GPU
by GPU), the placements, the OOM events and the learned interference (``model:interference``).
No FastAPI, no templates: the HTML page and the JSON endpoint render the same dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from carma_airflow.core.checkpoints import resume_line
from carma_airflow.core.estimators import outgrew_declaration
from carma_airflow.core.fencing import fence_line
from carma_airflow.core.grown import grown_line
from carma_airflow.core.shorten import whole_clauses
from carma_airflow.store import live_snapshots
from carma_airflow.store.records import OomRecord, PlacementRecord, TryOutcome
from carma_airflow.store.url import mask_password
from carma_airflow.ui import coerce as c
from carma_airflow.ui.timeline import Lane, TimelineBar, layout
from carma_airflow.views import waiting as waiting_view
from carma_airflow.views.learned import MODEL_PREFIX, interference
from carma_airflow.views.queue_place import place_of

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

SNAPSHOT_PREFIX = live_snapshots.PREFIX
SNAPSHOT_VERSION = 1
STALE_AFTER_S = 30.0  # a snapshot older than this: its executor is not running
PLACEMENT_LIMIT = 300
OOM_LIMIT = 50
MIN_WINDOW_S = 30.0
MAX_WINDOW_S = 24 * 3600.0


def build_state(
    store: Store, *, now: datetime | None = None, window_s: float | None = None, stale_after_s: float = STALE_AFTER_S
) -> dict[str, Any]:
    """The page's data: executors, GPUs with tenants, waiting tasks, timeline, OOMs and recoveries.

    ``window_s`` is how far back the timeline reaches; None: back to the oldest of the latest
    placements (at least 2 minutes, at most 24 hours).
    """
    now = now or datetime.now(timezone.utc)
    rows = store.executors()
    snapshots = live_snapshots.current(store.snapshots(SNAPSHOT_PREFIX), rows, now.timestamp(), stale_after_s)
    executors, gpus, live_waiting = _live(snapshots, now, stale_after_s)
    view = waiting_view.build(rows, store.running(), now, stale_after_s)  # every executor's waiting tries
    waiting = _all_waiting(view, live_waiting, now)
    placements = store.placements(limit=PLACEMENT_LIMIT)
    one_host = len({g["host"] for g in gpus}) <= 1
    gpu_names = {g["uuid"]: _gpu_label(g, one_host) for g in gpus}
    return {
        "version": 1,
        "generated_at": now.isoformat(),
        "store": mask_password(store.masked_url),
        "stale_after_s": stale_after_s,
        "executors": executors,
        "gpus": gpus,
        "waiting": waiting,
        "executors_running": len(view.running),
        "not_running": view.not_running_line(),  # None while a CarmaExecutor beats
        "timeline": _timeline(placements, gpus, gpu_names, now, window_s),
        "ooms": [_oom(ev, store, gpu_names) for ev in store.ooms(limit=OOM_LIMIT)],
        "counts": _counts(placements),
        "interference": interference(store.snapshots(MODEL_PREFIX)),
    }


# -- live snapshots --------------------------------------------------------------------------


def _live(
    snapshots: Mapping[str, tuple[datetime, dict[str, Any]]], now: datetime, stale_after_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    executors: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    by_uuid: dict[str, dict[str, Any]] = {}  # two executors on one host list the same GPUs
    freshest_first = sorted(snapshots.items(), key=lambda item: -live_snapshots.written_at(*item[1]))
    for name, (written_at, body) in freshest_first:
        at = c.epoch_dt(body.get("at")) or written_at
        age = max(0.0, (now - at).total_seconds())
        version = body.get("version")
        host = c.as_str(body.get("host")) or name.removeprefix(SNAPSHOT_PREFIX)
        executor: dict[str, Any] = {
            "name": name,
            "id": live_snapshots.executor_of(body),  # None: a snapshot from before ids (live_snapshots.py)
            "host": host,
            "at": at.isoformat(),
            "age_s": round(age, 1),
            "stale": age > stale_after_s,
            "policy": c.as_str(body.get("policy")),
            "backend": c.as_str(body.get("backend")),
            "queue": c.as_str(body.get("queue")),
            "running": c.as_int(body.get("running")),
            "dispatch": c.as_str(body.get("dispatch")),
            "pass_median_ms": c.as_float(c.as_dict(body.get("passes")).get("median_ms")),
            "pending_store_writes": c.as_int(body.get("pending_store_writes")),
            "problem": None if version == SNAPSHOT_VERSION else f"snapshot version {version!r} is not understood",
        }
        executors.append(executor)
        if executor["problem"]:
            continue
        for raw in c.as_dicts(body.get("gpus")):
            gpu = _gpu(raw, host, now, executor["stale"])
            seen = by_uuid.get(gpu["uuid"]) if gpu["uuid"] else None
            if seen is None:  # the freshest snapshot's readings of this GPU
                by_uuid[gpu["uuid"]] = gpu
                gpus.append(gpu)
            else:  # and every executor's tenants on it
                _add_tenants(seen, gpu["tenants"])
        for raw in c.as_dicts(body.get("waiting")):
            waiting.append(_waiting(raw, host, now))
            place = place_of(c.as_str(raw.get("key")) or "", [body])  # its priority and place, as `carma why`
            waiting[-1]["place"] = None if place is None else place.line()
    executors.sort(key=lambda e: e["name"])
    gpus.sort(key=lambda g: (g["host"], g["index"], g["uuid"]))
    waiting.sort(key=lambda w: -w["waiting_s"])
    return executors, gpus, waiting


def _gpu(raw: Mapping[str, Any], host: str, now: datetime, stale: bool) -> dict[str, Any]:
    total = c.as_int(raw.get("memory_total_mib"))
    used = c.as_int(raw.get("memory_used_mib"))
    free = raw.get("memory_free_mib")
    tenants: list[dict[str, Any]] = [
        {
            "label": c.as_str(t.get("label")),
            "key": c.as_str(t.get("key")),
            "reserved_mib": c.as_int(t.get("reserved_mib")),
            "since": c.iso(c.epoch_dt(t.get("since"))),
            "for_s": c.age(c.epoch_dt(t.get("since")), now),
            "activity": c.as_fraction(
                t.get("activity")
            ),  # learned solo SM activity; None: not known (or older executor)
        }
        for t in c.as_dicts(raw.get("tenants"))
    ]
    return {
        "uuid": c.as_str(raw.get("uuid")),
        "index": c.as_int(raw.get("index")),
        "name": c.as_str(raw.get("name")),
        "host": c.as_str(raw.get("host")) or host,
        "memory_total_mib": total,
        "memory_used_mib": used,
        "memory_free_mib": c.as_int(free) if isinstance(free, (int, float)) else max(0, total - used),
        "memory_used_pct": c.pct(used, total),
        "reserved_mib": sum(t["reserved_mib"] for t in tenants),
        "reserved_pct": c.pct(sum(t["reserved_mib"] for t in tenants), total),
        "smact": c.as_float(raw.get("smact")),
        "health": c.as_str(raw.get("health")) or "unknown",
        "health_reason": c.as_str(raw.get("health_reason")),
        "risk": c.as_str(raw.get("risk")) or "unknown",
        "tenants": tenants,
        "snapshot_stale": stale,
    }


def _add_tenants(gpu: dict[str, Any], tenants: Sequence[dict[str, Any]]) -> None:
    """Another executor's tenants on a GPU already listed (one entry per try)."""
    keys = {t["key"] for t in gpu["tenants"]}
    gpu["tenants"] += [t for t in tenants if t["key"] not in keys]
    reserved = sum(t["reserved_mib"] for t in gpu["tenants"])
    gpu.update(reserved_mib=reserved, reserved_pct=c.pct(reserved, gpu["memory_total_mib"]))


def _waiting(raw: Mapping[str, Any], host: str, now: datetime) -> dict[str, Any]:
    since = c.epoch_dt(raw.get("since"))
    return {
        "label": c.as_str(raw.get("label")),
        "key": c.as_str(raw.get("key")),
        "host": host,
        "since": c.iso(since),
        "waiting_s": c.age(since, now) or 0.0,
        "memory_mib": c.as_int(raw.get("memory_mib")),
        "gpus": c.as_int(raw.get("gpus")) or 1,
        "try_number": c.as_int(raw.get("try_number")),
        "activity": c.as_fraction(raw.get("activity")),
        "reason": c.as_str(raw.get("reason")),
    }


def _all_waiting(view: waiting_view.WaitView, live: Sequence[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The store's waiting tries, of every executor (a live snapshot's entry, fresher, where it has
    one); and a snapshot's entry the store has no row of yet (its write is queued)."""
    by_key = {w["key"]: w for w in live}
    out: list[dict[str, Any]] = []
    for w in view.waiting:
        p = w.record
        live_entry = by_key.pop(p.key, None)
        entry = dict(live_entry) if live_entry is not None else _waiting_record(p, now)
        entry.update(owner=p.owner, owner_running=w.owner_alive)
        if w.owner_alive is False:  # nothing places it until Airflow resets it
            entry["reason"] = f"its CarmaExecutor ({p.owner}) is not running (last reason: {entry['reason'] or '-'})"
        out.append(entry)
    out += [{**w, "owner": None, "owner_running": None} for w in by_key.values()]
    out.sort(key=lambda w: -w["waiting_s"])
    return out


def _waiting_record(p: PlacementRecord, now: datetime) -> dict[str, Any]:
    return {
        "label": p.label or f"{p.dag_id}.{p.task_id}",
        "key": p.key,
        "host": p.host or "",
        "since": c.iso(p.decided_at),
        "waiting_s": c.age(p.decided_at, now) or 0.0,
        "memory_mib": p.estimate_mib or 0,
        "gpus": 1,  # a waiting row names no GPU; the live snapshot has the count
        "try_number": p.try_number,
        "activity": None,
        "reason": p.summary,
    }


def _gpu_label(gpu: Mapping[str, Any], one_host: bool) -> str:
    return f"GPU {gpu['index']}" if one_host else f"{gpu['host']} GPU {gpu['index']}"


# -- placements and OOMs ---------------------------------------------------------------------


def _placement(p: PlacementRecord, gpu_names: Mapping[str, str]) -> dict[str, Any]:
    return {
        "key": p.key,
        "label": p.label or f"{p.dag_id}.{p.task_id}",
        "dag_id": p.dag_id,
        "task_id": p.task_id,
        "run_id": p.run_id,
        "map_index": p.map_index,
        "try_number": p.try_number,
        "outcome": str(p.outcome),
        "gpus": [gpu_names.get(u, c.short_uuid(u)) for u in p.gpu_uuids],
        "gpu_uuids": list(p.gpu_uuids),
        "host": p.host,
        "decided_at": c.iso(p.decided_at),
        "started_at": c.iso(p.started_at),
        "ended_at": c.iso(p.ended_at),
        "estimate_mib": p.estimate_mib,
        "estimate_source": p.estimate_source,
        "outgrew_declaration": outgrew_declaration(p.estimate_source),  # flagged: its runs outgrew its memory
        # flagged: this try grew past what it was placed with and the fence let it through
        "grown": grown_line(str(p.outcome), p.peak_mib, p.estimate_mib, p.estimate_source == "declared"),
        "peak_mib": p.peak_mib,
        "summary": p.summary,
        "policy": p.policy,
        "resumed": resume_line(p.try_number, p.reasons),
        "fence": fence_line(p.reasons),  # the fence this try started under, per GPU
    }


def _timeline(
    placements: Sequence[PlacementRecord],
    gpus: Sequence[Mapping[str, Any]],
    gpu_names: Mapping[str, str],
    now: datetime,
    window_s: float | None,
) -> dict[str, Any]:
    lanes = [Lane(g["uuid"], gpu_names[g["uuid"]], f"{g['name']} · {g['host']}") for g in gpus]
    known = {lane.key for lane in lanes}
    for p in placements:  # GPUs a placement used that no live snapshot lists (an executor gone, a GPU removed)
        for u in p.gpu_uuids:
            if u not in known:
                known.add(u)
                lanes.append(Lane(u, f"{p.host or '?'} {c.short_uuid(u)}", ""))
    if window_s is None:
        oldest = min((p.decided_at for p in placements), default=now)
        window_s = (now - oldest).total_seconds() * 1.03
    window_s = min(max(window_s, MIN_WINDOW_S), MAX_WINDOW_S)
    start = now - timedelta(seconds=window_s)
    names = {lane.key: lane.label for lane in lanes}
    bars = [
        TimelineBar(
            key=p.key,
            label=p.label or f"{p.dag_id}.{p.task_id}",
            try_number=p.try_number,
            outcome=str(p.outcome),
            lanes=p.gpu_uuids,
            decided_at=p.decided_at,
            started_at=p.started_at,
            ended_at=p.ended_at,
            detail=_bar_detail(p, names),
        )
        for p in placements
    ]
    timeline = layout(lanes, bars, start, now)
    timeline["placements"] = [_placement(p, names) for p in placements]
    return timeline


def _bar_detail(p: PlacementRecord, names: Mapping[str, str]) -> str:
    where = ", ".join(names.get(u, c.short_uuid(u)) for u in p.gpu_uuids) or "no GPU"
    parts = [f"{p.label or p.dag_id + '.' + p.task_id} try {p.try_number}: {p.outcome} on {where}"]
    if p.started_at is not None:
        waited = (p.started_at - p.decided_at).total_seconds()
        parts.append(f"started {c.hms(p.started_at)} after {waited:.0f} s waiting")
    if p.ended_at is not None:
        parts.append(f"ended {c.hms(p.ended_at)}")
    if p.estimate_mib is not None:
        flag = "declared memory outgrown: " if outgrew_declaration(p.estimate_source) else ""
        parts.append(f"{flag}estimate {p.estimate_mib} MiB ({p.estimate_source or '?'})")
    if p.peak_mib is not None:
        parts.append(f"peak {p.peak_mib} MiB")
    if p.summary:
        parts.append(p.summary)
    if (resumed := resume_line(p.try_number, p.reasons)) is not None:
        parts.append(resumed)
    if (fence := fence_line(p.reasons)) is not None:
        parts.append(f"memory fence: {fence}")
    parts += [line for line in p.reasons if "; cost " in line][:4]  # what each priced option was predicted to cost
    return "\n".join(parts)


def _oom(ev: OomRecord, store: Store, gpu_names: Mapping[str, str]) -> dict[str, Any]:
    failed = store.placement(ev.placement_key)
    run_id = failed.run_id if failed is not None else None
    later = [
        p for p in store.latest_for(ev.dag_id, ev.task_id, run_id=run_id, limit=20) if p.try_number > ev.try_number
    ]
    recovery = min(later, key=lambda p: p.try_number) if later else None
    gpu_uuids = [u for u in (ev.gpu_uuid or "").split(",") if u]
    return {
        "at": c.iso(ev.at),
        "label": (failed.label if failed is not None and failed.label else f"{ev.dag_id}.{ev.task_id}"),
        "dag_id": ev.dag_id,
        "task_id": ev.task_id,
        "run_id": run_id,
        "try_number": ev.try_number,
        "gpus": [gpu_names.get(u, c.short_uuid(u)) for u in gpu_uuids],
        "estimate_mib": failed.estimate_mib if failed is not None else None,
        "peak_mib": ev.peak_mib,
        "message": whole_clauses(ev.message, 300),  # by clause, never mid-sentence
        "recovery": None if recovery is None else _recovery(recovery, gpu_names),
    }


def _recovery(p: PlacementRecord, gpu_names: Mapping[str, str]) -> dict[str, Any]:
    where = ", ".join(gpu_names.get(u, c.short_uuid(u)) for u in p.gpu_uuids)
    text = {
        TryOutcome.SUCCESS: f"recovered: try {p.try_number} succeeded on {where}",
        TryOutcome.RUNNING: f"retrying: try {p.try_number} runs on {where}",
        TryOutcome.WAITING: f"try {p.try_number} waits for a GPU with room",
        TryOutcome.OOM: f"try {p.try_number} ran out of memory again on {where}",
        TryOutcome.FAILED: f"try {p.try_number} failed on {where or 'no GPU'}",
    }[p.outcome]
    resumed = resume_line(p.try_number, p.reasons)
    if resumed is not None:  # what the OOM cost: from its last checkpoint, not from zero
        text = f"{text}; {resumed.split(' ', 2)[2]}"
    return {
        "try_number": p.try_number,
        "outcome": str(p.outcome),
        "gpus": [gpu_names.get(u, c.short_uuid(u)) for u in p.gpu_uuids],
        "estimate_mib": p.estimate_mib,
        "estimate_source": p.estimate_source,
        "text": text,
        "summary": p.summary,
        "resumed": resumed,
    }


def _counts(placements: Sequence[PlacementRecord]) -> dict[str, int]:
    counts = {o.value: 0 for o in TryOutcome}
    for p in placements:
        counts[p.outcome.value] += 1
    return counts
