"""The launcher never preloads a GPU framework (taskrun/warm.py): one imported there would be
imported in every try before its cap hook (taskrun/framework_hook.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from carma_airflow.taskrun.warm import preload
said = preload(tuple(sys.argv[1:]))
print(json.dumps({"said": said, "torch": "torch" in sys.modules}))
"""


def _preload(tmp_path: Path, *modules: str) -> dict[str, object]:
    (tmp_path / "torch").mkdir(exist_ok=True)  # a stub framework: importing it costs nothing
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "pulls_torch.py").write_text("import torch\n")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}", "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_framework_asked_for_is_not_imported_and_is_named(tmp_path: Path) -> None:
    got = _preload(tmp_path, "json", "torch.cuda")
    assert got["torch"] is False
    said = [str(s) for s in got["said"]]  # type: ignore[attr-defined]
    assert any(s.startswith("torch.cuda (a GPU framework: never preloaded") for s in said), said


def test_a_framework_pulled_in_by_a_preloaded_module_is_named(tmp_path: Path) -> None:
    got = _preload(tmp_path, "pulls_torch")
    said = [str(s) for s in got["said"]]  # type: ignore[attr-defined]
    assert "torch (pulled in by the preload: every try imports it before its cap hook)" in said


def test_the_default_preload_imports_no_framework(tmp_path: Path) -> None:
    from carma_airflow.taskrun.warm import FRAMEWORKS, TASK_RUNNER_MODULES

    assert not [m for m in TASK_RUNNER_MODULES if m.split(".")[0] in FRAMEWORKS]
