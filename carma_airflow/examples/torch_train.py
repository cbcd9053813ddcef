"""Two small PyTorch training jobs on synthetic data, for the example DAG ``dags/torch_training.py``.

* :func:`train_cnn`: a small convolutional classifier.  Each image is noise with one bright
  square in one of four quadrants; the label is the quadrant.
* :func:`train_transformer`: a small causal transformer language model.  Each sequence counts
  upwards modulo the vocabulary from a random start; the model learns the next token.

Both tasks are learnable in a few dozen steps, so a falling loss shows the training works.
They run on the first GPU the process sees (CarmaExecutor sets ``CUDA_VISIBLE_DEVICES`` to the
GPUs it placed the task on) and on the CPU where there is none.  Each returns a plain dict
(``loss_start``, ``loss_end``, ``steps``, ``device``, ``peak_mib``, ``seconds``, ...) that
Airflow can keep as the task's XCom; ``peak_mib`` is ``torch.cuda.max_memory_allocated`` in
MiB on a GPU and None on the CPU.

Both checkpoint and resume (docs/checkpoints.md): every ``checkpoint_every`` steps the model,
the optimiser, the step, the losses so far and the data generator's state go to
``<checkpoint_dir>/<model>.pt`` (written to a temporary file, then renamed: a try killed
mid-save leaves the last whole checkpoint).  A later call with the same folder goes on from the
last checkpoint, and its losses are those of a run that was never interrupted.  Under
CarmaExecutor the folder is the task instance's own (``CARMA_CHECKPOINT_DIR``), so an OOM retry
resumes where the crashed try last saved; elsewhere nothing is saved unless a folder is given.

PyTorch is an optional dependency: ``pip install 'carma-airflow[torch]'``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["SmallCnn", "TinyTransformer", "checkpoint_folder", "pick_device", "train_cnn", "train_transformer"]


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given ('cpu', 'cuda', 'cuda:1'), else the first visible GPU, else the CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class SmallCnn(nn.Module):
    """Conv-BN-ReLU blocks that halve the image, average pooling to a 2x2 grid, a linear head."""

    def __init__(self, width: int = 32, depth: int = 3, channels: int = 3, classes: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = channels
        for i in range(depth):
            c_out = width * 2**i
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c_out
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(c_in * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.features(x))
        return logits


class TinyTransformer(nn.Module):
    """Token and position embeddings, a causal pre-norm transformer encoder, a tied output head."""

    def __init__(self, vocab: int = 64, d_model: int = 64, heads: int = 4, layers: int = 2, seq_len: int = 32) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.zeros(1, seq_len, d_model))
        block = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.scale = d_model**-0.5  # keeps the tied head's first logits near zero
        self.mask: torch.Tensor
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.position[:, :n]
        h = self.encoder(h, mask=self.mask[:n, :n], is_causal=True)
        logits: torch.Tensor = self.norm(h) @ self.embed.weight.T * self.scale
        return logits


def _quadrant_images(count: int, image_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise images with a bright square in one quadrant; the label is the quadrant (0..3)."""
    images = torch.randn(count, 3, image_size, image_size, generator=generator) * 0.5
    labels = torch.randint(0, 4, (count,), generator=generator)
    half = image_size // 2
    side = max(1, half // 2)
    offsets = torch.randint(0, half - side + 1, (count, 2), generator=generator)
    for i in range(count):
        q = int(labels[i])
        top = (q // 2) * half + int(offsets[i, 0])
        left = (q % 2) * half + int(offsets[i, 1])
        images[i, :, top : top + side, left : left + side] += 2.0
    return images, labels


def _counting_sequences(count: int, seq_len: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Sequences start, start+1, ... modulo ``vocab``; one more token than the model reads."""
    starts = torch.randint(0, vocab, (count, 1), generator=generator)
    return (starts + torch.arange(seq_len + 1)) % vocab


def checkpoint_folder(checkpoint_dir: str | os.PathLike[str] | None) -> Path | None:
    """Where to checkpoint: ``checkpoint_dir`` if given, else the task instance's folder under
    CarmaExecutor (``CARMA_CHECKPOINT_DIR``), else nowhere (None)."""
    if checkpoint_dir is not None:
        return Path(checkpoint_dir)
    from carma_airflow.checkpoint import CHECKPOINT_ENV

    named = os.environ.get(CHECKPOINT_ENV)
    return Path(named) if named else None


class _Checkpoints:
    """Save and resume one training in ``path`` (model, optimiser, step, losses, generator)."""

    def __init__(self, path: Path, every: int, generator: torch.Generator | None) -> None:
        if every < 1:
            raise ValueError(f"checkpoint_every must be at least 1 step, got {every}")
        self.path, self.every, self.generator = path, every, generator
        self.saved = 0

    def resume(self, model: nn.Module, optimiser: torch.optim.Optimizer, losses: list[float]) -> int | None:
        """Load the last checkpoint into ``model`` and ``optimiser``; the step to go on from, or None."""
        if not self.path.exists():
            return None
        from carma_airflow.checkpoint import last_checkpoint, record_resume

        state = torch.load(self.path, map_location="cpu", weights_only=True)
        try:
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ValueError(
                f"the checkpoint {self.path} is not of this model ({str(exc).splitlines()[0]}); "
                "delete it to start over, or train with the sizes it was saved with"
            ) from None
        if self.generator is not None and "generator" in state:
            self.generator.set_state(state["generator"])
        losses[:] = [float(v) for v in state["losses"]]
        step = int(state["step"])
        recorded = last_checkpoint(self.path.parent)
        record_resume(recorded if recorded is not None and recorded.step == step else None, step=step)
        return step

    def after(self, step: int, model: nn.Module, optimiser: torch.optim.Optimizer, losses: list[float]) -> None:
        """Save once ``step`` steps are done, if it is a checkpoint step."""
        if step % self.every:
            return
        from carma_airflow.checkpoint import atomic_path, record_checkpoint

        state: dict[str, Any] = {
            "model": model.state_dict(),
            "optimizer": optimiser.state_dict(),
            "step": step,
            "losses": list(losses),
        }
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:
            torch.save(state, tmp)
        record_checkpoint(step, folder=self.path.parent)
        self.saved += 1


def _fit(
    model: nn.Module,
    batches: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    steps: int,
    lr: float,
    device: torch.device,
    checkpoints: _Checkpoints | None = None,
) -> dict[str, Any]:
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model.to(device).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[float] = []
    resumed = checkpoints.resume(model, optimiser, losses) if checkpoints is not None else None
    started = time.perf_counter()
    for step in range(min(resumed or 0, steps), steps):
        inputs, targets = batches(step)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        loss = loss_of(model(inputs), targets)
        optimiser.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        optimiser.step()
        losses.append(float(loss.detach()))  # synchronises with the GPU once per step
        if checkpoints is not None and step + 1 < steps:  # the last step needs none: the task ends
            checkpoints.after(step + 1, model, optimiser, losses)
    seconds = time.perf_counter() - started
    losses = losses[:steps]
    if not all(math.isfinite(v) for v in losses):
        raise FloatingPointError(f"training diverged (loss {losses[-1]}); lower the learning rate")
    k = max(1, min(5, steps // 5))  # mean of the first and last few steps: less noisy than one batch
    peak = torch.cuda.max_memory_allocated(device) // (1024 * 1024) if device.type == "cuda" else None
    return {
        "loss_start": sum(losses[:k]) / k,
        "loss_end": sum(losses[-k:]) / k,
        "steps": steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "peak_mib": peak,
        "seconds": round(seconds, 3),
        "resumed_from_step": resumed,
        "checkpoints": checkpoints.saved if checkpoints is not None else 0,
    }


def train_cnn(
    *,
    batch_size: int = 64,
    steps: int = 100,
    image_size: int = 32,
    width: int = 32,
    depth: int = 3,
    lr: float = 3e-3,
    dataset_size: int = 1024,
    seed: int = 0,
    device: str | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 50,
) -> dict[str, Any]:
    """Train :class:`SmallCnn` on quadrant images; return the losses, device, peak memory, time.
    Checkpoints every ``checkpoint_every`` steps in ``checkpoint_dir`` (see the module's words)."""
    if image_size < 2**depth or image_size % 2:
        raise ValueError(f"image_size must be even and at least 2**depth ({2**depth}), got {image_size}")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    images, labels = _quadrant_images(dataset_size, image_size, generator)
    where = pick_device(device)
    images, labels = images.to(where), labels.to(where)  # the whole synthetic set fits on the device
    epochs = max(1, -(-steps * batch_size // dataset_size))  # a shuffle per epoch: a step has its own batch
    order = torch.cat([torch.randperm(dataset_size, generator=generator) for _ in range(epochs)]).to(where)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = order[step * batch_size : (step + 1) * batch_size]
        return images[idx], labels[idx]

    model = SmallCnn(width=width, depth=depth)
    folder = checkpoint_folder(checkpoint_dir)
    saves = _Checkpoints(folder / "cnn.pt", checkpoint_every, None) if folder is not None else None
    result = _fit(model, batch, nn.functional.cross_entropy, steps=steps, lr=lr, device=where, checkpoints=saves)
    return {"model": "cnn", "batch_size": batch_size, "image_size": image_size, **result}


def train_transformer(
    *,
    batch_size: int = 32,
    steps: int = 100,
    seq_len: int = 32,
    vocab: int = 64,
    d_model: int = 64,
    heads: int = 4,
    layers: int = 2,
    lr: float = 3e-3,
    seed: int = 0,
    device: str | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 50,
) -> dict[str, Any]:
    """Train :class:`TinyTransformer` on counting sequences (next-token prediction); checkpoints
    as :func:`train_cnn` does (the data generator's state too, so a resumed run sees the same data)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    where = pick_device(device)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = _counting_sequences(batch_size, seq_len, vocab, generator)
        return seqs[:, :-1], seqs[:, 1:]

    def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    model = TinyTransformer(vocab=vocab, d_model=d_model, heads=heads, layers=layers, seq_len=seq_len)
    folder = checkpoint_folder(checkpoint_dir)
    saves = _Checkpoints(folder / "transformer.pt", checkpoint_every, generator) if folder is not None else None
    result = _fit(model, batch, loss_of, steps=steps, lr=lr, device=where, checkpoints=saves)
    return {"model": "transformer", "batch_size": batch_size, "seq_len": seq_len, **result}
