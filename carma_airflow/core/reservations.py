"""The reservation ledger: which try holds how much memory on which GPU, since when.

The placer decides from a :class:`~carma_airflow.core.gpu.ClusterView`, but the monitor's readings
lag behind placements: a try placed a moment ago has not allocated anything yet, so its GPU still
reads as free.  Like the Kubernetes scheduler's cache of "assumed" pods, the ledger remembers every
placement from the moment it is made until its try ends, and lays those reservations over the
monitor's GPUs as the tenants the placer counts (:meth:`Reservations.view`).

Whether a tenant is *seen* decides how the placer counts it (``Placer.facts``): an unseen tenant
counts with its whole reservation (and the activity prior), a seen one with what it was observed
to hold, which the GPU's free reading already covers (a fenced one, its reservation carrying a
``kept_margin_mib``, with at least its promise for its life).  A tenant becomes seen in one of two
ways:

* a driver that knows each process's memory (the simulator) says so with :meth:`observe`;
* with ``seen_after_s`` set, once the tenant is that old: the monitor's readings include it by
  then (what the executor and the GPU kit assume, with the lock time as that age).

Pure data: the caller passes the time in, nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from operator import is_not

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.errors import DuplicateKeyError
from carma_airflow.core.gpu import ClusterView, GpuState, Tenant

_NEVER = float("inf")


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one try holds: ``mib`` on each of its GPUs since ``since``.

    ``exclusive``: the try must have its GPUs to itself (asked exclusive, or its memory is
    unknown); no one joins it.  ``observed_mib``: what it was last seen to hold per GPU, None
    until a driver observes it.  ``kept_margin_mib``: what its fence lets it grow into above
    ``mib`` for its life (``TaskRequest.kept_margin_mib``); None: unfenced.
    """

    key: str
    label: str
    gpu_uuids: tuple[str, ...]
    mib: int
    since: float
    exclusive: bool = False
    observed_mib: int | None = None
    activity: ActivityEstimate | None = None  # the try's expected solo SM activity (its request's)
    kept_margin_mib: int | None = None


class Reservations:
    """Reservations of the tries that run, indexed by try key and by GPU.

    ``seen_after_s``: a tenant this old counts as seen by the monitor (its memory is in the free
    reading); None: only :meth:`observe` makes a tenant seen.
    """

    def __init__(self, *, seen_after_s: float | None = None) -> None:
        self.seen_after_s = seen_after_s
        self._by_key: dict[str, Reservation] = {}
        # per GPU, in placement order (dicts keep insertion order): the co-tenant lists read in
        # the order tries arrived, as a user expects
        self._on: dict[str, dict[str, Reservation]] = {}
        self._last_placed: dict[str, float] = {}
        # the last view, to redo only what changed: its input and output states by position, when
        # it was made and until when its tenants' seen-ness holds, and the GPUs whose tenants
        # changed since
        self._last_in: list[GpuState] = []
        self._last_out: list[GpuState] = []
        self._last_at = _NEVER
        self._last_until = -_NEVER
        self._where: dict[str, int] = {}  # uuid -> its place in the last view's input
        self._dirty: set[str] = set()
        # per GPU its tenants as the last view counted them: (tenants, from, until, seen_after_s),
        # the same answer for every time in [from, until) while its reservations stay (a GPU
        # whose monitor state moves pass after pass, its tenants the same, is not counted afresh)
        self._counted: dict[str, tuple[tuple[Tenant, ...], float, float, float | None]] = {}

    # -- the book ----------------------------------------------------------------------------
    def reserve(
        self,
        key: str,
        label: str,
        gpu_uuids: Sequence[str],
        mib: int,
        now: float,
        *,
        exclusive: bool = False,
        activity: ActivityEstimate | None = None,
        kept_margin_mib: int | None = None,
    ) -> Reservation:
        """Book ``mib`` on each of ``gpu_uuids`` for try ``key`` from ``now`` on (``kept_margin_mib``:
        what its fence promises it above that for its life, None unfenced; see :class:`Reservation`).

        Also the GPUs' last placement time (the placer's lock window starts there).  A key holds
        one reservation: booking it again is a driver's bug, not a second placement.
        """
        if key in self._by_key:
            held = self._by_key[key]
            raise DuplicateKeyError(
                f"try {key!r} already holds GPUs {', '.join(held.gpu_uuids)}; release it before reserving again"
            )
        res = Reservation(
            key, label, tuple(gpu_uuids), mib, now, exclusive, activity=activity, kept_margin_mib=kept_margin_mib
        )
        self._by_key[key] = res
        for uuid in res.gpu_uuids:
            self._on.setdefault(uuid, {})[key] = res
            self._last_placed[uuid] = now
            self._touch(uuid)
        return res

    def observe(self, key: str, mib: int) -> bool:
        """Record what try ``key`` holds per GPU now; False when it holds nothing (it ended first)."""
        res = self._by_key.get(key)
        if res is None:
            return False
        self._replace(replace(res, observed_mib=mib))
        return True

    def learn_activity(self, key: str, activity: ActivityEstimate) -> bool:
        """What is known now of try ``key``'s solo SM activity (a monitor's per-process reading
        while it runs, or its task's newer estimate); False when it holds nothing."""
        res = self._by_key.get(key)
        if res is None:
            return False
        if res.activity != activity:
            self._replace(replace(res, activity=activity))
        return True

    def _replace(self, res: Reservation) -> None:
        """A held try's reservation with new facts, on each of its GPUs."""
        self._by_key[res.key] = res
        for uuid in res.gpu_uuids:
            self._on[uuid][res.key] = res
            self._touch(uuid)

    def release(self, key: str) -> Reservation | None:
        """End try ``key``'s reservation and return it; None when it held none (released already).

        The GPUs' last placement time stays: the lock window is about when a GPU was placed on,
        not about who is still there.
        """
        res = self._by_key.pop(key, None)
        if res is None:
            return None
        for uuid in res.gpu_uuids:
            on = self._on[uuid]
            del on[key]
            if not on:
                del self._on[uuid]
            self._touch(uuid)
        return res

    def _touch(self, uuid: str) -> None:
        self._dirty.add(uuid)
        self._counted.pop(uuid, None)

    # -- reading -----------------------------------------------------------------------------
    def get(self, key: str) -> Reservation | None:
        return self._by_key.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Reservation]:
        return iter(list(self._by_key.values()))

    def on(self, uuid: str) -> tuple[Reservation, ...]:
        """The reservations on one GPU, in placement order."""
        return tuple(self._on.get(uuid, {}).values())

    def last_placed_at(self, uuid: str) -> float | None:
        return self._last_placed.get(uuid)

    def tenants_on(self, uuid: str, now: float) -> tuple[Tenant, ...]:
        """The GPU's tenants as the placer counts them at ``now`` (see the module docstring)."""
        return self._tenants(uuid, now)[0]

    def _tenants(self, uuid: str, now: float) -> tuple[tuple[Tenant, ...], float]:
        """The tenants, and until when that answer holds (a tenant's lock window ending changes it)."""
        on = self._on.get(uuid)
        if not on:
            return (), _NEVER
        after = self.seen_after_s
        until = _NEVER
        out = []
        for r in on.values():
            seen = r.observed_mib
            if seen is None and after is not None:
                if now - r.since >= after:
                    seen = r.mib  # the monitor's readings include it by now: its reservation, held
                else:
                    until = min(until, r.since + after)
            out.append(Tenant(r.key, r.label, r.mib, r.since, seen, r.exclusive, r.activity, r.kept_margin_mib))
        return tuple(out), until

    def view(self, now: float, gpus: Sequence[GpuState]) -> ClusterView:
        """The placer's view: the monitor's GPUs with the ledger's tenants and last placements.

        The ledger is the only source of tenants: tenants the given states carry are replaced.
        A GPU's merged state is reused while its observed state (the same object at the same
        place in ``gpus``), its tenants and their seen-ness stay the same: a simulator that keeps
        a settled GPU's state pays nothing for it pass after pass.
        """
        n = len(gpus)
        last_in = self._last_in
        if n == len(last_in) and self._last_at <= now < self._last_until:
            # which places hold another object than last time, found in C (a simulator hands
            # hundreds of GPUs over on every pass, and most of them did not change)
            redo = set(compress(range(n), map(is_not, gpus, last_in)))
            if any(gpus[i].uuid != last_in[i].uuid for i in redo):  # GPUs changed places
                self._where = {st.uuid: i for i, st in enumerate(gpus)}
            if self._dirty:
                where = self._where
                redo.update(where[u] for u in self._dirty if u in where)
            out = list(self._last_out)
            until = self._last_until
        else:
            redo = set(range(n))
            self._where = {st.uuid: i for i, st in enumerate(gpus)}
            out = list(gpus)
            until = _NEVER
        last_placed = self._last_placed
        counted, after = self._counted, self.seen_after_s
        for i in redo:
            st = gpus[i]
            kept = counted.get(st.uuid)
            if kept is not None and kept[1] <= now < kept[2] and kept[3] == after:
                tenants, expires = kept[0], kept[2]
            else:
                tenants, expires = self._tenants(st.uuid, now)
                counted[st.uuid] = (tenants, now, expires, after)
            last = last_placed.get(st.uuid)
            out[i] = st if tenants == st.tenants and last == st.last_placed_at else _with(st, tenants, last)
            until = min(until, expires)
        self._last_in, self._last_out = list(gpus), out
        self._last_at, self._last_until = now, until
        self._dirty.clear()
        return ClusterView(now, tuple(out))


def _with(st: GpuState, tenants: tuple[Tenant, ...], last_placed_at: float | None) -> GpuState:
    # the constructor, not dataclasses.replace (several times slower); a test checks that every
    # field of GpuState is carried over
    return GpuState(
        st.uuid,
        st.index,
        st.spec,
        st.free_mib,
        st.used_mib,
        st.window,
        tenants,
        st.health,
        st.host,
        last_placed_at,
    )


__all__ = ["Reservation", "Reservations"]
