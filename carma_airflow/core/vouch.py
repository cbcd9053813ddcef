"""Learned peaks buy collocations only where the interference model can vouch for them.

A task's learned peak is usually below what day one reserved for it (a declared or estimated
size, or the floor): exact, it lets more tenants share a GPU.  Whether that sharing pays is the
interference model's call, and until its fit for the cluster's GPU models has left the prior it
cannot make it: the prior is mild by design.  Measured (issue 41, ``bench/learning.py --pieces``):
day two with the learned peaks alone was 3-8 % slower than day one where interference is heavy,
every set of traces.

Decision: a learned estimate *below* the one made without history waits for a learned fit
(:func:`vouched_need`); one above it (a task that outgrew its declaration) is taken at once, since
that is safety, not density.  The executor (``executor/intake.py``) and the simulator
(``sim/engine.py``) both apply it, so a day two there is the executor's day two.
"""

from __future__ import annotations

from carma_airflow.core.task import MemoryNeed


def vouched_need(learned: MemoryNeed, cold: MemoryNeed | None, vouched: bool) -> MemoryNeed:
    """``learned`` (the estimate with the task's history), unless it is below ``cold`` (the same
    estimator without history) while the interference fit is not ``vouched`` (learned for every
    GPU model the try could run on): then ``cold``, its source saying why."""
    if vouched or cold is None or cold.whole_gpu or learned.whole_gpu or learned.mib >= cold.mib:
        return learned
    return MemoryNeed(
        cold.mib,
        f"{cold.source}; learned peaks ({learned.mib} MiB) are used once the interference model has learned"
        " this cluster's GPUs",
        cold.whole_gpu,
        cold.add_headroom,
    )


__all__ = ["vouched_need"]
