"""Placement checks as named filters, each saying why not with its numbers.

As in the Kubernetes scheduler framework (a filter plugin answers ``InsufficientResource{Reason,
Requested, Used, Capacity}``), a :class:`Filter` decides whether one GPU may take one try and
answers None or a :class:`Rejection`: the filter's name, the :class:`~carma_airflow.core.decision.Reason`
it counts under, and the numbers behind the refusal (requested, what the GPU has, its capacity,
the limit, their unit).  The text ``carma why``, the log and the GPU page show is rendered from
those numbers, once, by :meth:`Rejection.text`.

A policy is the filters it composes (:meth:`Policy.placement_filters`) plus its score (its keys).
The engine runs a filter at one of two stages:

- **per GPU** (``per_try`` False): the filter reads the GPU's facts only.  The pool cache asks it
  when it classifies a GPU (once per GPU whose facts change, not once per try): a GPU it rejects
  is out of every try's candidates and its rejection is listed in every waiting decision.  Only
  GPUs with tenants are asked, unless ``idle_too`` (health).
- **per try** (``per_try`` True): the filter reads the try too (its GPU model, ...).  The scans ask
  it of each candidate for the tries its :meth:`Filter.applies` says need it (a try that names
  no GPU model costs the GPU-model filter nothing), and the structural checks (a try no GPU set
  could ever take, the drain walks, the hold order) ask :meth:`Filter.ever`.

The engine's own per-try checks (the memory fit, GPUs held for a starved try, a try that needs
an idle GPU, GPUs kept for larger tries) are written out in the scans, which run by the thousand
per pass; their rejections are stated by the filters in :mod:`carma_airflow.core.engine_filters`.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Hashable, Sequence
from typing import ClassVar, NamedTuple

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.core.units import format_mib

Number = int | float
# the request a per-GPU filter is asked with (it reads the GPU only)
NO_REQUEST = TaskRequest(key="", label="", memory=MemoryNeed(1, "none"))


class Rejection(NamedTuple):
    """One filter's "not this GPU for this try", with its numbers (immutable, compared by value).

    ``form`` is the text with fields for the numbers: ``{requested}``, ``{have}`` (what the GPU
    has or uses now), ``{capacity}``, ``{limit}`` and the names in ``more``; numbers in MiB
    (``unit == "MiB"``) are rendered as :func:`~carma_airflow.core.units.format_mib` renders them.
    A tuple, not a frozen dataclass: a pass makes one for each GPU a filter rejects.
    """

    filter: str
    reason: Reason
    form: str
    unit: str = ""
    requested: Number | str | None = None
    have: Number | str | None = None
    capacity: Number | None = None
    limit: Number | None = None
    more: tuple[tuple[str, Number | str], ...] = ()

    def text(self) -> str:
        """The rejection as ``carma why`` shows it (only the numbers its text names are rendered)."""
        form = self.form
        if "{" not in form:
            return form
        values: dict[str, object] = dict(self.more) if self.more else {}
        if self.unit == "MiB":
            for name in _fields(form):
                value = getattr(self, name)
                values[name] = format_mib(value) if isinstance(value, _REAL) else value
        else:
            for name in _fields(form):
                values[name] = getattr(self, name)
        return form.format_map(values)

    @classmethod
    def said(cls, filter: str, reason: Reason, text: str) -> Rejection:
        """A rejection known by its text only (a policy's or a pricer's own note)."""
        return cls(filter, reason, text.replace("{", "{{").replace("}", "}}"))


_NUMBERS = frozenset(("requested", "have", "capacity", "limit"))
_REAL = (int, float)


@functools.cache
def _fields(form: str) -> tuple[str, ...]:
    """The numbers (of requested, have, capacity, limit) a rejection's text names (a pure function
    of the text: cached, as a pass renders the same few texts for many GPUs)."""
    return tuple(sorted({name for _, name, _, _ in string.Formatter().parse(form) if name} & _NUMBERS))


class Filter:
    """A named placement check.  Subclasses set :attr:`name` and :attr:`reason` and implement
    :meth:`check`; a per-try filter may also narrow :meth:`applies`, :meth:`ever`,
    :meth:`never` and :meth:`request_key` (see the module doc for the stages)."""

    name: ClassVar[str] = "filter"
    reason: ClassVar[Reason]
    per_try: ClassVar[bool] = False
    idle_too: ClassVar[bool] = False  # per GPU: asked of idle GPUs too (else of GPUs with tenants only)

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        """None: this GPU may take ``request`` as far as this filter goes; else why not."""
        raise NotImplementedError

    # per try only -------------------------------------------------------------------------
    def applies(self, request: TaskRequest) -> bool:
        """Whether ``request`` needs this filter at all (False: the scans skip it for the try)."""
        return True

    def request_key(self, request: TaskRequest) -> Hashable:
        """What of ``request`` the filter reads: tries equal in it (and in the rest of their
        shape) get the same answers, so a pass decides once for them."""
        return None

    def ever(self, state: GpuState, request: TaskRequest) -> bool:
        """Whether this GPU could take ``request`` once its tenants leave (False: never, whatever
        runs on it: the structural checks leave it out)."""
        return True

    def never(self, request: TaskRequest, gpus: Sequence[GpuState]) -> str:
        """The text of a try no GPU of ``gpus`` could ever take because of this filter."""
        return f"no GPU passes the {self.name} filter"

    def headline(self, request: TaskRequest) -> str:
        """A waiting decision's headline where this filter holds every GPU back."""
        return f"every GPU is refused by the {self.name} filter"


def gpu_stage(filters: Sequence[Filter]) -> tuple[tuple[Filter, ...], tuple[Filter, ...]]:
    """A policy's per-GPU filters, in its order: (those asked of every GPU, those asked of GPUs
    with tenants only)."""
    mine = [f for f in filters if not f.per_try]
    return tuple(f for f in mine if f.idle_too), tuple(f for f in mine if not f.idle_too)


def try_stage(filters: Sequence[Filter]) -> tuple[Filter, ...]:
    """A policy's per-try filters, in its order."""
    return tuple(f for f in filters if f.per_try)


def first_rejection(filters: Sequence[Filter], facts: GpuFacts, request: TaskRequest) -> Rejection | None:
    """The first of ``filters`` that rejects ``facts`` for ``request``, or None."""
    for flt in filters:
        rejection = flt.check(facts, request)
        if rejection is not None:
            return rejection
    return None


def could_ever(filters: Sequence[Filter], state: GpuState, request: TaskRequest) -> bool:
    """Whether every one of ``filters`` could let this GPU take ``request`` once it drains."""
    return all(flt.ever(state, request) for flt in filters)


__all__ = [
    "NO_REQUEST",
    "Filter",
    "Rejection",
    "could_ever",
    "first_rejection",
    "gpu_stage",
    "try_stage",
]
