"""`carma model export` / `carma model import`: a fit learned in one deployment starts another."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from test_ops import _learned_model, _open, carma, env  # noqa: F401  (env: the fixture)

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.interference import InterferenceModel
from carma_airflow.store.peers import ExecutorRecord
from carma_airflow.views.learned import EXPORT_FORMAT, export_document, merge_import, read_export

DOC = "model:interference"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


def _other(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:  # noqa: F811
    """A second deployment: its own AIRFLOW_HOME and store."""
    home = tmp_path / "other"
    home.mkdir()
    other = {**env, "AIRFLOW_HOME": str(home)}
    _open(other).migrate()
    return other


def test_a_fit_exported_from_one_store_starts_another(env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    nothing = carma(env, "model", "export")
    assert nothing.returncode != 0 and "nothing learned yet" in nothing.stderr
    store = _open(env)
    store.put_snapshot(DOC, NOW, _learned_model())
    store.close()
    out = tmp_path / "fit.json"
    wrote = carma(env, "model", "export", str(out))
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.strip() == f"wrote a100-40gb, h100-80gb to {out}"
    assert json.loads(out.read_text())["format"] == EXPORT_FORMAT

    other = _other(tmp_path, env)
    got = carma(other, "model", "import", str(out))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["imported a100-40gb", "imported h100-80gb"]
    shown = carma(other, "model")
    assert "a100-40gb: learned from 20 observations" in shown.stdout
    stored = _open(other).snapshots(DOC)[DOC][1]
    # what an executor of the other deployment starts from is the exported model, to the float
    assert InterferenceModel.from_dict(stored).to_dict() == InterferenceModel.from_dict(_learned_model()).to_dict()


def test_an_import_keeps_a_fit_this_deployment_learned_unless_told(
    env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    learned = _learned_model()
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(export_document((NOW, learned), ["A100-40GB"])))
    other = _other(tmp_path, env)
    own = {"a100-40gb": learned["h100-80gb"], "h100-80gb": learned["a100-40gb"]}  # its own, learned for H100
    store = _open(other)
    store.put_snapshot(DOC, NOW, own)
    store.close()
    # the A100 fit of the other store is the prior's (one observation): taken; nothing else touched
    got = carma(other, "model", "import", str(fit))
    assert got.returncode == 0 and got.stdout.splitlines() == ["imported a100-40gb"]
    assert _open(other).snapshots(DOC)[DOC][1] == {**own, "a100-40gb": learned["a100-40gb"]}
    # a learned fit is kept
    fit.write_text(json.dumps(export_document((NOW, {"h100-80gb": learned["a100-40gb"]}))))
    store = _open(other)
    store.put_snapshot(DOC, NOW, {"h100-80gb": learned["a100-40gb"]})
    store.close()
    kept = carma(other, "model", "import", str(fit))
    assert kept.returncode == 0 and "kept h100-80gb: this deployment has learned its own fit" in kept.stdout


def test_an_import_waits_for_the_running_executor_to_stop(env: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(export_document((NOW, _learned_model()))))
    store = _open(env)
    now = datetime.now(timezone.utc)
    store.register_executor(ExecutorRecord("ex-1", "sched-01", 4242, now, now))
    store.close()
    got = carma(env, "model", "import", str(fit))
    assert got.returncode != 0
    assert "a CarmaExecutor is running (ex-1 on sched-01 (pid 4242))" in got.stderr
    assert "stop the scheduler" in got.stderr
    assert DOC not in _open(env).snapshots(DOC)  # nothing written
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = carma(env, "model", "import", str(bad))
    assert out.returncode != 0 and "is not JSON" in out.stderr and "\n" not in out.stderr.strip()


def test_an_export_names_what_it_lacks_and_an_import_what_it_cannot_read() -> None:
    learned = _learned_model()
    only = export_document((NOW, learned), ["A100-40GB", "a100-40gb"])
    assert list(only["models"]) == ["a100-40gb"] and only["written_at"] == NOW.isoformat()
    with pytest.raises(CarmaError, match=r"no fit for v100 in the store \(it has: a100-40gb, h100-80gb\)"):
        export_document((NOW, learned), ["V100"])
    assert read_export(only) == {"a100-40gb": learned["a100-40gb"]}
    with pytest.raises(CarmaError, match="not a carma model export"):
        read_export(learned)  # the store's document itself, not an export
    with pytest.raises(CarmaError, match=r"t4: cannot be read .* nothing was imported"):
        read_export({**only, "models": {**only["models"], "t4": "garbage"}})
    with pytest.raises(CarmaError, match="holds no GPU model's fit"):
        read_export({**only, "models": {}})


def test_merging_an_import_replaces_an_unreadable_or_prior_fit_and_keeps_a_learned_one() -> None:
    learned = _learned_model()
    incoming = {"a100-40gb": learned["a100-40gb"], "h100-80gb": learned["a100-40gb"], "l4": learned["a100-40gb"]}
    current = {"a100-40gb": learned["a100-40gb"], "h100-80gb": learned["h100-80gb"], "l4": "garbage", "t4": {}}
    merged, taken, kept = merge_import(current, incoming)
    assert (taken, kept) == (["h100-80gb", "l4"], ["a100-40gb"])
    assert merged == {**current, "h100-80gb": learned["a100-40gb"], "l4": learned["a100-40gb"]}
    merged, taken, kept = merge_import(current, incoming, replace=True)
    assert (taken, kept) == (list(incoming), []) and merged == {**current, **incoming}
    assert merge_import(None, incoming) == (incoming, list(incoming), [])
