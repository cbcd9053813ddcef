"""The PyTorch example workloads train for real (tiny sizes, on the CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from carma_airflow.examples.torch_train import pick_device, train_cnn, train_transformer  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)  # the test machine's two cores are shared


def test_cnn_loss_falls_on_the_cpu() -> None:
    r = train_cnn(batch_size=16, steps=40, image_size=16, width=8, depth=2, dataset_size=128)
    assert r["model"] == "cnn" and r["steps"] == 40 and r["batch_size"] == 16
    assert r["device"] == "cpu" and r["peak_mib"] is None
    assert r["loss_start"] > 1.0  # about ln 4 for four classes at the start
    assert r["loss_end"] < 0.5 * r["loss_start"]
    assert r["seconds"] > 0 and r["parameters"] > 1000


def test_transformer_learns_to_count() -> None:
    r = train_transformer(batch_size=8, steps=40, seq_len=16, vocab=16, d_model=32, heads=2, layers=1)
    assert r["model"] == "transformer" and r["device"] == "cpu" and r["peak_mib"] is None
    assert r["loss_end"] < 0.3 * r["loss_start"]


def test_same_seed_same_losses() -> None:
    a = train_transformer(batch_size=4, steps=5, seq_len=8, vocab=8, d_model=16, heads=2, layers=1, seed=3)
    b = train_transformer(batch_size=4, steps=5, seq_len=8, vocab=8, d_model=16, heads=2, layers=1, seed=3)
    assert a["loss_start"] == b["loss_start"] and a["loss_end"] == b["loss_end"]


def test_device_choice_follows_what_is_visible() -> None:
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert str(pick_device()) == expected
    assert str(pick_device("cpu")) == "cpu"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: train_cnn(steps=0), "steps must be at least 1"),
        (lambda: train_cnn(image_size=6, depth=3), "image_size must be even"),
        (lambda: train_transformer(d_model=30, heads=4), "multiple of heads"),
    ],
)
def test_bad_sizes_say_what_to_change(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_peak_memory_is_reported() -> None:
    r = train_cnn(batch_size=32, steps=5, device="cuda")
    assert r["device"] == "cuda:0" and r["peak_mib"] is not None and r["peak_mib"] > 0
