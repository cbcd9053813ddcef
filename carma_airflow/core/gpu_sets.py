"""The GPU sets a multi-GPU try may take on a fleet of several GPU models (issue 44).

A data-parallel try on several GPUs goes at its slowest GPU's pace: on an H100 and an L4 it runs
at the L4's, and the H100 is held for the whole run at a tenth of its speed.  So where a pricing
policy prices each model's speed (:meth:`CompletionTime.paces
<carma_airflow.core.policies.completion_time.CompletionTime.paces>`):

* **one model first**: the idle scan groups GPUs by host *and model* (:func:`set_key`); the first
  complete group is taken as before, so a set of one model is never passed over for a mixed one;
* **a mixed set is priced at its pace** (the try a starvation hold protects takes the first one, as
  before: it must start): where no host has ``n`` idle GPUs of one model, the idle
  GPUs go to the pricer with the collocation candidates, and each host's GPUs are priced per pace
  (:func:`paced`): for each of the host's models, the GPUs of that model or faster for this try,
  the newcomer's work at that model's pace on each of them.  A mixed set then competes with
  sharing and with waiting for a set to drain at what it would really give;
* **waiting is priced at the drained set's pace**: the drain of a multi-GPU try counts sets per
  host and model, and a mixed set at its slowest model's run (placement_drains.py).

Decision (issue 44): on ``bench/mixed_fleet.py``'s grid the worst makespans were 2-GPU tries on
mixed idle sets: ``xlnet_base_cased_2`` on an H100 and an L4 (2xH100-80GB + 6xL4, ``table``
speeds, ``types:1``, s100, day one) ran 51,597 s where two H100s run it in 3,542 s, and it ended
the day at 1.04x most-free-memory's makespan; on 2xH100-80GB + 2xA100-40GB + 4xV100-32GB an
A100 and a V100 took it for 41,201 s (1.29x).  The idle scan took the first two idle GPUs of a
host in the fastest-first order, whatever their models, without pricing them.

On one model (or a policy that does not price per model) nothing here applies: sets are per host.
Pure: the per-model runs are asked through ``work``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

from carma_airflow.core.facts import GpuFacts


def set_key(f: GpuFacts, by_model: bool) -> Hashable:
    """What a multi-GPU try's GPU set is grouped by: the host, and with ``by_model`` its model too."""
    return (f.state.host, f.state.spec.name) if by_model else f.state.host


def paced(gpus: Sequence[GpuFacts], n: int, work: Callable[[str], float]) -> Iterator[tuple[str, list[GpuFacts]]]:
    """One host's candidate GPUs per pace: for each of their models (fastest first for this try by
    ``work``, its predicted run per model), the model and the GPUs of it or faster, where they are
    at least ``n``.  A set of ``n`` of them goes at that model's pace or faster."""
    runs: dict[str, float] = {}
    for f in gpus:
        m = f.state.spec.name
        if m not in runs:
            runs[m] = work(m)
    for model, pace in sorted(runs.items(), key=lambda kv: (kv[1], kv[0])):
        eligible = [f for f in gpus if runs[f.state.spec.name] <= pace]
        if len(eligible) >= n:
            yield model, eligible


def first_set(gpus: Sequence[GpuFacts], n: int) -> list[GpuFacts] | None:
    """The first ``n`` of ``gpus`` (in their order) on one host: the set the first host to hold ``n``
    of them gives (None: no host holds ``n``)."""
    per_host: dict[str, list[GpuFacts]] = {}
    for f in gpus:
        group = per_host.setdefault(f.state.host, [])
        group.append(f)
        if len(group) == n:
            return group
    return None


def spare_sets(groups: dict[Hashable, list[GpuFacts]], n: int) -> list[GpuFacts]:
    """The idle GPUs a by-model scan grouped without completing a set (``groups``: by host and
    model), on the hosts where they number ``n`` or more together: mixed sets, for the pricer."""
    per_host: dict[str, list[GpuFacts]] = {}
    for group in groups.values():
        for f in group:
            per_host.setdefault(f.state.host, []).append(f)
    return [f for host in per_host.values() if len(host) >= n for f in host]


__all__ = ["first_set", "paced", "set_key", "spare_sets"]
