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


# -- checkpoint and resume (docs/checkpoints.md) ------------------------------------------------
CNN = {"batch_size": 8, "image_size": 16, "width": 8, "depth": 2, "dataset_size": 64}
TRANSFORMER = {"batch_size": 4, "seq_len": 8, "vocab": 8, "d_model": 16, "heads": 2, "layers": 1}


@pytest.mark.parametrize(
    ("train", "sizes", "name"), [(train_cnn, CNN, "cnn.pt"), (train_transformer, TRANSFORMER, "transformer.pt")]
)
def test_a_resumed_training_goes_on_from_its_last_checkpoint_and_ends_as_one_never_stopped(
    tmp_path, capsys, train, sizes, name
) -> None:
    whole = train(steps=20, **sizes)  # never interrupted, no folder: saves nothing
    assert whole["checkpoints"] == 0 and whole["resumed_from_step"] is None
    assert not list(tmp_path.iterdir())

    # "try 1" gets to step 13 and stops: its checkpoints are those of steps 5 and 10
    first = train(steps=13, checkpoint_dir=tmp_path, checkpoint_every=5, **sizes)
    assert first["checkpoints"] == 2 and (tmp_path / name).is_file()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # written whole, then renamed

    # "try 2" finds them and goes on from step 10, not from zero and not from 13
    second = train(steps=20, checkpoint_dir=tmp_path, checkpoint_every=5, **sizes)
    assert second["resumed_from_step"] == 10 and second["steps"] == 20
    assert "resumed from step 10" in capsys.readouterr().out  # the try's log says where
    assert second["loss_start"] == whole["loss_start"]  # the losses before the stop come from the checkpoint
    assert second["loss_end"] == pytest.approx(whole["loss_end"], rel=1e-5)


def test_under_carma_the_task_instances_folder_is_used(tmp_path, monkeypatch) -> None:
    from carma_airflow.checkpoint import CHECKPOINT_ENV, last_checkpoint

    monkeypatch.setenv(CHECKPOINT_ENV, str(tmp_path))
    monkeypatch.setenv("CARMA_TRY_NUMBER", "1")
    r = train_transformer(steps=6, checkpoint_every=2, **TRANSFORMER)
    assert r["checkpoints"] == 2 and (tmp_path / "transformer.pt").is_file()
    progress = last_checkpoint(tmp_path)
    assert progress is not None and progress.step == 4 and progress.try_number == 1


def test_a_checkpoint_of_another_model_says_to_delete_it(tmp_path) -> None:
    train_cnn(steps=3, checkpoint_dir=tmp_path, checkpoint_every=1, **CNN)
    with pytest.raises(ValueError, match=r"is not of this model.*delete it to start over"):
        train_cnn(steps=5, checkpoint_dir=tmp_path, checkpoint_every=1, **{**CNN, "width": 16})
