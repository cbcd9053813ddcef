"""What NVML costs, per call kind: a counting wrapper around the loaded binding.

:class:`CountedBinding` stands in for the NVML binding (nvidia-ml-py's module) inside an
:class:`~carma_airflow.monitor.nvml.NvmlProbe` built with ``count_calls=True`` (the GPU kit's
``nvml-cost`` step, ``bench/nvml_calls.py``): every ``nvml*`` function called through it is
counted with the CPU time (of the calling thread) and the wall time it took; everything else
(error classes, constants, structs) passes through untouched.  Off by default: the executor's
probe calls the binding directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class CallCost:
    """Calls of one NVML function and the time they took (seconds)."""

    calls: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def cpu_us_per_call(self) -> float:
        return 1e6 * self.cpu_s / self.calls if self.calls else 0.0

    @property
    def wall_us_per_call(self) -> float:
        return 1e6 * self.wall_s / self.calls if self.calls else 0.0


class CountedBinding:
    """The NVML binding (nvidia-ml-py's module), its ``nvml*`` functions counted and timed by name."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.costs: dict[str, CallCost] = {}
        self._wrapped: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not name.startswith("nvml") or isinstance(attr, type) or not callable(attr):
            return attr
        fn = self._wrapped.get(name)
        if fn is None:
            fn = self._wrapped[name] = self._counted(name, attr)
        return fn

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        cost = self.costs.setdefault(name, CallCost())

        def call(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                cost.cpu_s += time.thread_time() - cpu
                cost.wall_s += time.perf_counter() - wall
                cost.calls += 1

        call.__name__ = name
        return call
