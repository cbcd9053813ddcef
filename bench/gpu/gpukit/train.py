"""One task of the kit, in its own process: real PyTorch training on synthetic data, or carma's
synthetic workload on simulated GPUs.

    python -m gpukit.train '<TaskSpec as JSON>'

The GPUs are the ones in ``CUDA_VISIBLE_DEVICES`` (set by whoever placed the task).  The try's
outcome goes where CarmaExecutor reads it (``CARMA_RESULT_FILE``: success, or the failure
classified by carma's ``classify_failure`` with the peak memory reached), and the training
figures (steps, times, peak) to ``CARMA_KIT_METRICS``.  ``CARMA_KIT_BACKEND=simulated`` runs
:func:`carma_airflow.testing.simulated_training` instead of PyTorch.

Real training: small CNNs (conv/BN/ReLU stages) on random 32x32 or 64x64 images and small
pre-norm transformer encoders on random tokens, bf16 autocast, AdamW.  A time-bound run trains
``seconds`` after 3 warm-up steps and reports its steps; a step-bound run trains ``steps``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from gpukit.workload import TaskSpec

METRICS_ENV = "CARMA_KIT_METRICS"
BACKEND_ENV = "CARMA_KIT_BACKEND"
SIM_SCALE_ENV = "CARMA_KIT_SIM_SCALE"
LEDGER_ENV = "CARMA_SIM_LEDGER"
_MIB = 1024 * 1024
_WARMUP_STEPS = 3
_SYNC_EVERY = 10


# -- real training -------------------------------------------------------------------------


def _cnn(torch: Any, width: int, blocks: int, classes: int = 100) -> Any:
    nn = torch.nn
    layers: list[Any] = []
    c_in, c = 3, width
    for stage in range(3):
        for _ in range(blocks):
            layers += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
            c_in = c
        if stage < 2:
            layers.append(nn.MaxPool2d(2))
            c *= 2
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


class _LanguageModel:
    """Embedding + pre-norm transformer encoder + LM head (built lazily: torch is imported late)."""

    @staticmethod
    def build(torch: Any, vocab: int, d_model: int, heads: int, layers: int) -> Any:
        nn = torch.nn

        class Model(nn.Module):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(vocab, d_model)
                layer = nn.TransformerEncoderLayer(
                    d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
                )
                self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
                self.head = nn.Linear(d_model, vocab)

            def forward(self, tokens: Any) -> Any:
                return self.head(self.encoder(self.embed(tokens)))

        return Model()


def _model_and_batch(torch: Any, spec: TaskSpec, device: Any) -> tuple[Any, Any, Any, bool]:
    p = spec.params
    if spec.kind in ("cnn", "hog"):
        model = _cnn(torch, p.get("width", 32), p.get("blocks", 2))
        size = p.get("image", 32)
        x = torch.randn(p.get("batch", 64), 3, size, size, device=device)
        y = torch.randint(0, 100, (p.get("batch", 64),), device=device)
        return model.to(device), x, y, False
    if spec.kind in ("transformer", "ramp"):
        vocab = p.get("vocab", 8192)
        model = _LanguageModel.build(torch, vocab, p.get("d_model", 256), p.get("heads", 4), p.get("layers", 2))
        tokens = torch.randint(0, vocab, (p.get("batch", 16), p.get("seq", 128) + 1), device=device)
        return model.to(device), tokens[:, :-1], tokens[:, 1:], True
    raise ValueError(f"unknown task kind {spec.kind!r}; use cnn, transformer, hog or ramp")


def train_torch(spec: TaskSpec) -> dict[str, Any]:
    """Train ``spec`` on the first visible GPU; raises torch.OutOfMemoryError when memory runs out."""
    began = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"CUDA error: no CUDA-capable device is detected (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})"
        )
    device = torch.device("cuda", 0)
    torch.backends.cudnn.benchmark = True
    held: list[Any] = []
    if spec.ballast_mib > 0:  # the hog: memory held for the whole run (a cache, an embedding table)
        ballast = torch.empty(spec.ballast_mib * _MIB, dtype=torch.uint8, device=device)
        ballast.fill_(1)
        held.append(ballast)
    model, x, y, is_lm = _model_and_batch(torch, spec, device)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    chunk_mib = 512

    def step() -> Any:
        if spec.ramp_mib and sum(t.numel() for t in held) < spec.ramp_mib * _MIB:
            # activations that grow over the first steps (longer sequences, a larger batch)
            held.append(torch.ones(chunk_mib * _MIB, dtype=torch.uint8, device=device))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]) if is_lm else out, y.reshape(-1) if is_lm else y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(_WARMUP_STEPS):
        step()
    while spec.ramp_mib and sum(t.numel() for t in held) < spec.ramp_mib * _MIB:
        step()  # the ramp belongs to start-up: reach the full size before timing
    torch.cuda.synchronize(device)
    startup_s = time.monotonic() - began
    t0 = time.monotonic()
    steps = 0
    loss = None
    if spec.steps is not None:
        for _ in range(spec.steps):
            loss = step()
        steps = spec.steps
        torch.cuda.synchronize(device)
    else:
        while True:
            for _ in range(_SYNC_EVERY):
                loss = step()
            steps += _SYNC_EVERY
            torch.cuda.synchronize(device)
            if time.monotonic() - t0 >= spec.seconds:
                break
    train_s = time.monotonic() - t0
    return {
        "steps": steps,
        "train_s": train_s,
        "startup_s": startup_s,
        "peak_mib": int(torch.cuda.max_memory_reserved(device) // _MIB),
        "loss": float(loss.item()) if loss is not None else None,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
    }


# -- simulated training --------------------------------------------------------------------


def train_simulated(spec: TaskSpec, sim_scale: float) -> dict[str, Any]:
    from carma_airflow.testing import simulated_training

    began = time.monotonic()
    out = simulated_training(
        peak_mib=spec.sim_peak_mib,
        seconds=spec.seconds * sim_scale,
        activity=spec.sim_activity,
        ramp_s=0.2,
        step_s=0.05,
    )
    wall = time.monotonic() - began
    return {
        "steps": None,
        "train_s": float(out["train_s"]),
        "startup_s": wall - float(out["train_s"]),
        "peak_mib": int(out["peak_mib"]),
        "loss": None,
        "device": "simulated",
        "sim_slowdown": float(out["slowdown"]),
    }


def run_task(spec: TaskSpec, backend: str | None = None, sim_scale: float | None = None) -> dict[str, Any]:
    """Run one task on this process's GPUs; exceptions (CUDA OOM included) propagate."""
    kind = (backend or os.environ.get(BACKEND_ENV, "nvml")).strip().lower()
    if kind == "simulated":
        scale = sim_scale if sim_scale is not None else float(os.environ.get(SIM_SCALE_ENV, "0.15"))
        out = train_simulated(spec, scale)
    else:
        out = train_torch(spec)
    return {"task": spec.name, **out}


# -- the process ---------------------------------------------------------------------------


def _peak_after_failure(message: str = "") -> int | None:
    """What the crashed try reached, as CarmaExecutor's listener measures it: what the GPU
    counted for the process, its CUDA context included.  PyTorch's reserved memory leaves the
    context out (on an H200 about 760 MiB: 6,936 reserved against "this process has 7.37 GiB"),
    so its OOM message's figure is taken where it is larger."""
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        from carma_airflow.monitor.ledger import Ledger

        peak = Ledger(ledger).peak(os.getpid())
        if peak is not None:
            return int(peak)
    from carma_airflow.core.oom_figures import oom_figures

    held = oom_figures(message).process
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        reserved = int(torch.cuda.max_memory_reserved() // _MIB)
        return reserved if held is None else max(reserved, int(held))
    return None if held is None else int(held)


def main(argv: list[str]) -> int:
    from carma_airflow.core.recovery import classify_failure
    from gpukit.carma_shim import TryResult, write_result

    if len(argv) != 1:
        print("usage: python -m gpukit.train '<TaskSpec as JSON>'", file=sys.stderr)
        return 2
    spec = TaskSpec.from_json(argv[0])
    metrics_path = os.environ.get(METRICS_ENV)
    try:
        metrics = run_task(spec)
    except Exception as exc:
        exc_type = type(exc).__name__
        message = str(exc)
        failure = classify_failure(exc_type, message)
        peak = _peak_after_failure(message)
        write_result(TryResult("failed", failure.kind.value, exc_type, message[:2000], peak))
        print(f"[kit] {spec.name} failed: {failure.kind.value} ({failure.evidence}); peak {peak} MiB", flush=True)
        print(f"[kit] {exc_type}: {message[:500]}", flush=True)
        return 1
    write_result(TryResult("success", peak_mib=metrics["peak_mib"]))
    if metrics_path:
        Path(metrics_path).write_text(json.dumps(metrics))
    print(f"[kit] {spec.name} done: {json.dumps(metrics)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
