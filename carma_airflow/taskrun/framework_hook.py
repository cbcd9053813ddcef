"""Framework caps, applied in the try's own process when the task first imports the framework.

Importing PyTorch or TensorFlow up front costs seconds (and a CUDA context) for a try that
never uses them, so nothing is imported here: :func:`install_framework_caps` puts a finder at
the head of ``sys.meta_path`` that waits for ``import torch`` / ``import tensorflow``, lets the
import run, then applies the try's cap (carma_airflow/taskrun/fence_env.py) to the module:

* PyTorch: ``torch.cuda.set_per_process_memory_fraction(cap / total, device)`` on each visible
  device, deferred to CUDA's lazy initialisation (``torch.cuda._lazy_call``) where PyTorch has
  it, so a try that imports torch and never touches CUDA makes no context.  Past the cap the
  caching allocator raises its usual ``OutOfMemoryError`` with "... allowed;" in the message.
* TensorFlow: one logical device per GPU with ``memory_limit=cap`` MiB, before its runtime
  initialises (a RuntimeError there, e.g. the task touched the GPU first, is reported, not raised).
* JAX needs no hook: its fraction is in the environment (``XLA_CLIENT_MEM_FRACTION``).

A probe is not an import: ``importlib.util.find_spec("torch")`` (which ``transformers`` runs at
its own import to see what is installed) asks the finder for a spec and never executes it, so the
finder keeps waiting and acts only when a module is really executed; each framework is capped
once.  A framework already imported when the hook is installed (by the DAG file, a plugin), or
imported past it (a finder put ahead of ours later), is capped as soon as the hook sees it, and
the try's log says so.

Not covered by any of them: the CUDA context itself (450-760 MiB per process), NCCL's own
buffers, and allocations by other libraries (cuDNN/cuBLAS workspaces outside the allocator,
CuPy, custom kernels).  docs/isolation.md lists what each mode covers.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from carma_airflow.core.fencing import IsolationMode
from carma_airflow.taskrun.driver_cap import note
from carma_airflow.taskrun.fence_env import TryFence, describe_try_fence, fence_from_env
from carma_airflow.taskrun.live_cap import CAP_FILE_ENV, CapFollower, say

_MIB = 1024 * 1024
# said of a framework the try had imported before its hook was installed (the DAG file, a plugin)
EARLY = "was imported before the cap hook was installed (by the DAG file or a plugin); capped now: "
Apply = Callable[[ModuleType, TryFence], str]


def cap_torch(torch: Any, fence: TryFence, cap_file: str | None = None) -> str:
    """Cap PyTorch's caching allocator on each visible device (at CUDA's lazy init if possible);
    with ``cap_file`` (taskrun/live_cap.py) the cap follows the file as co-tenants change."""
    current = list(fence.cap_mib)

    def apply() -> None:
        for device, cap in enumerate(current):
            if device >= torch.cuda.device_count():
                break
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap * _MIB / total), device)

    follows = ""
    if cap_file:

        def follow(caps: tuple[int, ...]) -> None:
            current[:] = caps[: len(current)]
            if torch.cuda.is_initialized():
                apply()
            say(f"PyTorch cap now {', '.join(f'{c} MiB' for c in current)} per GPU (co-tenants changed)")

        CapFollower(cap_file, follow).start()
        follows = ", following its co-tenants"
    lazy = getattr(torch.cuda, "_lazy_call", None)
    if callable(lazy) and not torch.cuda.is_initialized():
        lazy(apply)
        return f"PyTorch capped at {_caps(fence)} at its CUDA start{follows}"
    apply()
    return f"PyTorch capped at {_caps(fence)}{follows}"


def _cap_torch_here(torch: Any, fence: TryFence) -> str:
    return cap_torch(torch, fence, os.environ.get(CAP_FILE_ENV) or None)


def cap_tensorflow(tf: Any, fence: TryFence) -> str:
    """One logical device per GPU, limited to the cap (TensorFlow's only hard limit)."""
    try:
        gpus = tf.config.list_physical_devices("GPU")
        for device, cap in zip(gpus, fence.cap_mib, strict=False):
            tf.config.set_logical_device_configuration(device, [tf.config.LogicalDeviceConfiguration(memory_limit=cap)])
    except RuntimeError as exc:  # the runtime initialised first: too late for a limit
        return f"TensorFlow NOT capped ({exc}); it can grow past {_caps(fence)}"
    return f"TensorFlow capped at {_caps(fence)}"


HOOKS: dict[str, Apply] = {"torch": _cap_torch_here, "tensorflow": cap_tensorflow}


def _caps(fence: TryFence) -> str:
    return ", ".join(f"{c} MiB" for c in fence.cap_mib) + " per GPU"


class _CapAfterExec(importlib.abc.Loader):
    """Runs the real loader, then the cap: the module is complete before it is capped."""

    def __init__(self, loader: importlib.abc.Loader, after: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.after(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.loader, name)


class FrameworkCapFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the frameworks it caps, and caps each one once,
    when its module is executed (a ``find_spec`` probe leaves it waiting)."""

    def __init__(self, fence: TryFence, hooks: Mapping[str, Apply], report: Callable[[str], None]) -> None:
        self.fence = fence
        self.hooks = dict(hooks)  # the frameworks not capped yet
        self.report = report
        self.applied: list[str] = []
        self._lock = threading.Lock()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self._catch_up()
        if fullname not in self.hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CapAfterExec(spec.loader, lambda module: self.apply(fullname, module))
                return spec
        return None

    def _catch_up(self) -> None:
        """A framework imported past this finder (one put ahead of it in ``sys.meta_path``): cap it
        now, once it has finished importing, and say it was late."""
        for name in [n for n in self.hooks if n in sys.modules]:
            module = sys.modules[name]
            if not getattr(getattr(module, "__spec__", None), "_initializing", False):
                self.apply(name, module, late="imported past the cap hook (a finder ahead of it); capped late: ")

    def apply(self, name: str, module: ModuleType, late: str = "") -> None:
        """Cap ``module`` with the hook for ``name`` (once: a second call does nothing)."""
        with self._lock:
            hook = self.hooks.pop(name, None)
        if hook is None:
            return
        try:
            said = hook(module, self.fence)
        except Exception as exc:  # a cap that cannot be set must not break the task's import
            said = f"{name} NOT capped: {type(exc).__name__}: {exc}"
        said = f"{name} {late}{said}" if late else said
        self.applied.append(said)
        self.report(said)


def install_framework_caps(
    environ: Mapping[str, str] = os.environ,
    hooks: Mapping[str, Apply] = HOOKS,
    report: Callable[[str], None] = say,
) -> str:
    """Put the cap finder in place (once per process); a framework imported already (by the
    DAG file, say) is capped now.  Returns one line for the try's log."""
    gpus = len([u for u in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if u.strip()])
    fence = fence_from_env(environ, gpus or None)
    if fence is None:
        return "memory: unfenced (no cap for this try)"
    if any(isinstance(f, FrameworkCapFinder) for f in sys.meta_path):
        return f"memory: capped at {_caps(fence)} (caps already installed)"
    finder = FrameworkCapFinder(fence, hooks, report)
    for name in [n for n in finder.hooks if n in sys.modules]:
        finder.apply(name, sys.modules[name], late=EARLY)
    sys.meta_path.insert(0, finder)
    if fence.mode is IsolationMode.DRIVER:  # the mechanism, its cap per GPU, fixed or live (fence_env.py)
        return f"memory: {describe_try_fence(fence, environ)}; frameworks as well"
    return f"memory: {describe_try_fence(fence, environ)}; frameworks are capped when imported{note(environ)}"


__all__ = ["HOOKS", "FrameworkCapFinder", "cap_tensorflow", "cap_torch", "install_framework_caps"]
