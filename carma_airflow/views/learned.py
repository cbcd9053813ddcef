"""What the executor learned (issue 13), as the CLI and the GPU page show it.

Two things are learned from ended tries: each task's solo SM activity (rows of the store's
activity history, estimated with :func:`carma_airflow.core.activity.estimate_activity`) and the
interference coefficients of each GPU model (the store document ``model:interference``, the
JSON of :meth:`carma_airflow.core.interference.InterferenceModel.to_dict`).  This module turns
both into plain, JSON-ready dicts and one-line texts; it reads nothing itself, so the CLI, the
page and their tests share one reading.  The document is refitted with today's settings
(:meth:`InterferenceFit.from_dict`), exactly as an executor reads it when it starts, so what is
shown is what the next executor uses.  A document is data from another process, maybe another
version: a GPU model whose entry cannot be read is reported, never raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from carma_airflow.core.activity import DEFAULT_ACTIVITY_SETTINGS, ActivitySample, estimate_activity
from carma_airflow.core.errors import CarmaError
from carma_airflow.core.interference import (
    DEFAULT_INTERFERENCE_SETTINGS,
    InterferenceFit,
    InterferenceSettings,
    gpu_model_key,
)

INTERFERENCE_DOCUMENT = "model:interference"
MODEL_PREFIX = "model:"
EXPORT_FORMAT = "carma-interference/1"  # ``carma model export``'s file: {"format", "written_at", "models"}
_UNREADABLE = (TypeError, ValueError, KeyError, ArithmeticError)


def prior(settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> dict[str, Any]:
    """The coefficients every GPU model starts from, and how many observations move them."""
    return {
        "beta": settings.cold_beta,
        "activity_scale": settings.prior_scale,
        "confidence": settings.prior_confidence,
        "min_observations": settings.min_observations,
    }


def fit_dict(fit: InterferenceFit) -> dict[str, Any]:
    """One GPU model's fit: coefficients, their ranges, how sure, on how much, and the prior."""
    return {
        "gpu_model": fit.gpu_model,
        "beta": fit.beta,
        "beta_range": list(fit.beta_range),
        "activity_scale": fit.activity_scale,
        "activity_scale_range": list(fit.scale_range),
        "confidence": fit.confidence,
        "count": fit.count,
        "kept": len(fit.observations),
        "outliers": fit.outliers,
        "learned": fit.learned,
        "prior": {"beta": fit.settings.cold_beta, "activity_scale": fit.settings.prior_scale},
        "interval_level": fit.settings.interval_level,
        "tasks": fit.task_terms(),  # per task type: sensitivity and pressure multipliers (1.0: pooled)
    }


def _read_fit(key: str, entry: Any, settings: InterferenceSettings) -> InterferenceFit:
    """One GPU model's entry of the document, read as an executor reads it at start (raises one of
    :data:`_UNREADABLE` where it cannot be)."""
    return InterferenceFit.from_dict({**entry, "gpu_model": key}, settings)


def interference(
    snapshots: Mapping[str, tuple[datetime, dict[str, Any]]],
    settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS,
) -> dict[str, Any]:
    """The learned interference of every GPU model, from the store's ``model:`` documents.

    ``snapshots``: what :meth:`Store.snapshots` returns (``store.snapshots(MODEL_PREFIX)``).
    ``models`` is empty when nothing was learned yet; ``problems`` names the entries that could
    not be read (they are left out, as the executor would fail to read them too).
    """
    found = snapshots.get(INTERFERENCE_DOCUMENT)
    models: list[dict[str, Any]] = []
    problems: list[str] = []
    if found is not None:
        for name, entry in sorted(found[1].items()):
            if not isinstance(entry, Mapping):
                problems.append(f"{name}: not a fit ({type(entry).__name__}); the executor rewrites it at its next end")
                continue
            try:
                fit = _read_fit(gpu_model_key(str(name)), entry, settings)
            except _UNREADABLE as exc:
                problems.append(f"{name}: cannot be read ({type(exc).__name__}: {exc}); it uses the prior")
                continue
            models.append(fit_dict(fit))
    return {
        "document": INTERFERENCE_DOCUMENT,
        "written_at": None if found is None else found[0].isoformat(),
        "prior": prior(settings),
        "models": models,
        "problems": problems,
    }


def export_document(found: tuple[datetime, Mapping[str, Any]] | None, gpu_models: Sequence[str] = ()) -> dict[str, Any]:
    """What ``carma model export`` writes: the store's interference document (``found``: its
    :meth:`Store.snapshots` entry), or the fits of ``gpu_models`` only, with its format's name."""
    if found is None:
        raise CarmaError(f"nothing learned yet: the store holds no {INTERFERENCE_DOCUMENT} document to export")
    fits = dict(found[1])
    if gpu_models:
        wanted = list(dict.fromkeys(gpu_model_key(m) for m in gpu_models))
        missing = [m for m in wanted if m not in fits]
        if missing:
            has = ", ".join(sorted(fits)) or "none"
            raise CarmaError(f"no fit for {', '.join(missing)} in the store (it has: {has})")
        fits = {m: fits[m] for m in wanted}
    return {"format": EXPORT_FORMAT, "written_at": found[0].isoformat(), "models": fits}


def read_export(data: object, settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> dict[str, Any]:
    """The fits of an export file (by GPU model), each read as an executor would read it; a file
    that is not an export, or an entry that cannot be read, raises and nothing is taken from it."""
    models = data.get("models") if isinstance(data, Mapping) else None
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT or not isinstance(models, Mapping):
        raise CarmaError(
            f'not a carma model export: want a JSON object with "format": "{EXPORT_FORMAT}" and "models" '
            "(write one with carma model export)"
        )
    out: dict[str, Any] = {}
    for name, entry in models.items():
        key = gpu_model_key(str(name))
        try:
            _read_fit(key, entry, settings)
        except _UNREADABLE as exc:
            raise CarmaError(f"{name}: cannot be read ({type(exc).__name__}: {exc}); nothing was imported") from exc
        out[key] = dict(entry)
    if not out:
        raise CarmaError("the file holds no GPU model's fit; nothing was imported")
    return out


def merge_import(
    current: Mapping[str, Any] | None,
    incoming: Mapping[str, Any],
    replace: bool = False,
    settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS,
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(the interference document with ``incoming``'s fits, the GPU models taken, those kept).  A
    GPU model whose fit in ``current`` has left the prior keeps it unless ``replace``: what this
    deployment learned is not overwritten by what another learned."""
    merged = dict(current or {})
    taken: list[str] = []
    kept: list[str] = []
    for key, entry in incoming.items():
        mine = merged.get(key)
        if mine is not None and not replace:
            try:
                if _read_fit(key, mine, settings).learned:
                    kept.append(key)
                    continue
            except _UNREADABLE:
                pass  # an entry the executor cannot read either: it is replaced
        merged[key] = entry
        taken.append(key)
    return merged, taken, kept


def nothing_learned_line(settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> str:
    return (
        f"nothing learned yet: every GPU model uses the prior (beta {settings.cold_beta:.2f}, activity scale k "
        f"{settings.prior_scale:.2f}, confidence {settings.prior_confidence:.2f}); a model is fitted after "
        f"{settings.min_observations} ended tries that shared its GPUs"
    )


def fit_lines(row: Mapping[str, Any], min_observations: int) -> list[str]:
    """A GPU model's fit as the CLI prints it (three lines)."""
    if row["learned"]:
        state = f"learned from {row['count']} observations ({row['kept']} kept, {row['outliers']} outliers)"
    else:
        state = f"still the prior ({row['count']} of {min_observations} observations needed)"
    lo_b, hi_b = row["beta_range"]
    lo_k, hi_k = row["activity_scale_range"]
    lines = [
        f"{row['gpu_model']}: {state}, confidence {row['confidence']:.2f}",
        f"  beta {row['beta']:.3f} (range {lo_b:.3f}..{hi_b:.3f}), prior {row['prior']['beta']:.3f}",
        f"  activity scale k {row['activity_scale']:.3f} (range {lo_k:.3f}..{hi_k:.3f}), "
        f"prior {row['prior']['activity_scale']:.3f}",
    ]
    tasks = row.get("tasks") or {}
    if tasks:  # the task types with their own terms, the most sensitive first
        ranked = sorted(tasks.items(), key=lambda kv: -kv[1]["sensitivity"])
        shown = ", ".join(f"{name} x{t['sensitivity']:.2f}/x{t['pressure']:.2f}" for name, t in ranked[:5])
        more = f" (+{len(ranked) - 5} more)" if len(ranked) > 5 else ""
        lines.append(f"  task terms (sensitivity/pressure over the pooled fit): {shown}{more}")
    return lines


def activity(history: Sequence[tuple[float, str] | tuple[float, str, bool]]) -> dict[str, Any]:
    """A task's learned activity from its history rows, oldest first: (value, source), or (value,
    source, shared) where it is known whether the try shared its GPUs (its ``co_tasks``), as the
    executor learns it: a task's tries that never shared win over its shared ones (core/activity.py)."""
    samples = [ActivitySample(row[0], row[1], bool(row[2]) if len(row) > 2 else False) for row in history]
    estimate = estimate_activity(samples)
    sources = list(dict.fromkeys(s.source for s in samples[-DEFAULT_ACTIVITY_SETTINGS.window :]))
    return {
        "sm_activity": estimate.sm_activity,
        "count": estimate.count,
        "spread": estimate.spread,
        "low": estimate.low,
        "high": estimate.high,
        "confidence": estimate.confidence,
        "known": estimate.known,
        "sources": sources,
    }


def activity_line(summary: Mapping[str, Any]) -> str:
    """``activity: 0.42 (5 tries, spread 0.03, process)``, or that nothing is learned yet."""
    if not summary["known"]:
        return f"no activity learned yet (prior {summary['sm_activity']:.2f})"
    n = summary["count"]
    tries = f"{n} tr{'y' if n == 1 else 'ies'}"
    sources = ", ".join(summary["sources"])
    return f"activity: {summary['sm_activity']:.2f} ({tries}, spread {summary['spread']:.2f}, {sources})"


__all__ = [
    "EXPORT_FORMAT",
    "INTERFERENCE_DOCUMENT",
    "MODEL_PREFIX",
    "activity",
    "activity_line",
    "export_document",
    "fit_dict",
    "fit_lines",
    "interference",
    "merge_import",
    "nothing_learned_line",
    "prior",
    "read_export",
]
