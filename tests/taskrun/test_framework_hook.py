"""The framework import hook (taskrun/framework_hook.py) against fake torch and tensorflow
packages, each run in a fresh interpreter (the hook changes ``sys.meta_path``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAKE_TORCH = """
import json, os
calls = []
class _Props:
    total_memory = 40960 * 1024 * 1024
class cuda:
    _queued = []
    _init = False
    @staticmethod
    def is_initialized(): return cuda._init
    @staticmethod
    def _lazy_call(fn): cuda._queued.append(fn)
    @staticmethod
    def device_count(): return 2
    @staticmethod
    def get_device_properties(i): return _Props()
    @staticmethod
    def set_per_process_memory_fraction(fraction, device): calls.append([fraction, device])
    @staticmethod
    def init():  # what CUDA's lazy initialisation runs
        cuda._init = True
        for fn in cuda._queued: fn()
"""
FAKE_TF = """
calls = []
class config:
    class LogicalDeviceConfiguration:
        def __init__(self, memory_limit): self.memory_limit = memory_limit
    @staticmethod
    def list_physical_devices(kind): return ["GPU:0", "GPU:1"]
    @staticmethod
    def set_logical_device_configuration(dev, confs): calls.append([dev, confs[0].memory_limit])
"""


def run(tmp_path: Path, body: str, env: dict[str, str]) -> dict[str, object]:
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "tensorflow").mkdir(exist_ok=True)
    (tmp_path / "tensorflow" / "__init__.py").write_text(FAKE_TF)
    repo = Path(__file__).resolve().parents[2]
    code = "import json, sys\nfrom carma_airflow.taskrun.framework_hook import install_framework_caps\n"
    code += textwrap.dedent(body)
    full = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}", **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, check=False)
    assert out.returncode == 0, out.stderr
    return last_json(out.stdout)


def last_json(stdout: str) -> dict[str, object]:
    """The script's JSON object, the last one printed.  The hook prints [carma] lines, and its
    cap follower does so from a thread of its own: one can land on the same line as the script's
    JSON, before it or between it and its newline (print writes the two apart)."""
    decoder = json.JSONDecoder()
    for line in reversed(stdout.splitlines()):
        at = line.find('{"')
        if at >= 0:
            result, _ = decoder.raw_decode(line, at)
            assert isinstance(result, dict)
            return result
    raise AssertionError(f"no JSON object in the script's output: {stdout!r}")


CAPPED = {
    "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b",
    "CARMA_ISOLATION": "framework",
    "CARMA_MEMORY_PROMISE_MIB": "10240,10240",
    "CARMA_MEMORY_CAP_MIB": "10240,20480",
    "CARMA_MEMORY_CAP_LIVE": "0",
}


def test_torch_is_capped_per_device_at_cuda_start_not_at_import(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        line = install_framework_caps()
        import torch
        before = list(torch.calls)
        torch.cuda.init()
        print(json.dumps({"line": line, "before": before, "after": torch.calls}))
        """,
        CAPPED,
    )
    assert result["before"] == []  # importing torch makes no CUDA context
    assert result["after"] == [[0.25, 0], [0.5, 1]]
    assert "capped at 10240 MiB, 20480 MiB per GPU" in str(result["line"])


def test_tensorflow_gets_one_limited_logical_device_per_gpu(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        install_framework_caps()
        import tensorflow
        print(json.dumps({"calls": tensorflow.calls}))
        """,
        CAPPED,
    )
    assert result["calls"] == [["GPU:0", 10240], ["GPU:1", 20480]]


def test_a_framework_imported_before_the_hook_is_capped_at_once(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        import torch
        install_framework_caps()
        torch.cuda.init()
        print(json.dumps({"after": torch.calls}))
        """,
        CAPPED,
    )
    assert result["after"] == [[0.25, 0], [0.5, 1]]


@pytest.mark.parametrize("env", [CAPPED, {"CARMA_ISOLATION": "none"}, {}])
def test_nothing_is_imported_into_a_try_that_does_not_use_a_framework(tmp_path: Path, env: dict[str, str]) -> None:
    result = run(
        tmp_path,
        """
        before = set(sys.modules)
        install_framework_caps()
        import json as _j, email.mime.text  # a task that never imports a framework
        new = sorted(set(sys.modules) - before)
        print(json.dumps({"new": new}))
        """,
        env,
    )
    new = [str(m) for m in result["new"]]  # type: ignore[attr-defined]
    assert not [m for m in new if m.split(".")[0] in ("torch", "tensorflow", "jax", "carma_airflow", "airflow")]


def test_unfenced_try_installs_no_finder(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        line = install_framework_caps()
        import torch
        torch.cuda.init()
        print(json.dumps({"line": line, "calls": torch.calls, "finders": [type(f).__name__ for f in sys.meta_path]}))
        """,
        {"CARMA_ISOLATION": "none", "CUDA_VISIBLE_DEVICES": "GPU-a"},
    )
    assert result["calls"] == [] and "FrameworkCapFinder" not in result["finders"]  # type: ignore[operator]
    assert "unfenced" in str(result["line"])


def test_a_cap_that_fails_does_not_break_the_import(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        import carma_airflow.taskrun.framework_hook as hook
        def broken(module, fence): raise RuntimeError("no driver")
        said = []
        hook.install_framework_caps(hooks={"torch": broken}, report=said.append)
        import torch
        print(json.dumps({"said": said, "ok": hasattr(torch, "cuda")}))
        """,
        CAPPED,
    )
    assert result["ok"] is True
    assert result["said"] == ["torch NOT capped: RuntimeError: no driver"]


def test_the_hook_module_imports_only_the_standard_library_and_core() -> None:
    source = (Path(__file__).resolve().parents[2] / "carma_airflow/taskrun/framework_hook.py").read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert all("airflow." not in line or "carma_airflow" in line for line in imports)
    assert not any(name in json.dumps(imports) for name in ("torch", "tensorflow", "jax"))


def test_a_live_cap_follows_the_executors_cap_file(tmp_path: Path) -> None:
    cap_file = tmp_path / "caps" / "try.cap"
    cap_file.parent.mkdir()
    cap_file.write_text("10240,20480")
    result = run(
        tmp_path,
        f"""
        import time
        from carma_airflow.taskrun.live_cap import write_caps
        line = install_framework_caps()
        import torch
        torch.cuda.init()
        write_caps({str(cap_file)!r}, [8192, 8192])  # a co-tenant arrived
        deadline = time.time() + 10
        while len(torch.calls) < 4 and time.time() < deadline:
            time.sleep(0.1)
        print(json.dumps({{"line": line, "calls": torch.calls}}))
        """,
        {**CAPPED, "CARMA_MEMORY_CAP_FILE": str(cap_file)},
    )
    assert "capped at 10240 MiB, 20480 MiB" in str(result["line"])
    assert result["calls"] == [[0.25, 0], [0.5, 1], [0.2, 0], [0.2, 1]]  # at CUDA start, then tightened


def test_live_caps_leave_each_try_the_gpu_less_its_co_tenants() -> None:
    from carma_airflow.taskrun.live_cap import live_caps

    assert live_caps([40960], 8192, 512, [[12288]]) == (40960 - 512 - 12288,)
    assert live_caps([40960, 40960], 8192, 0, [[], [40000]]) == (40960, 8192)  # never below its reservation


def test_a_find_spec_probe_does_not_use_up_the_hook(tmp_path: Path) -> None:
    """What transformers does at import: ask whether torch is installed, import it later."""
    result = run(
        tmp_path,
        """
        import importlib.util
        said = []
        import carma_airflow.taskrun.framework_hook as hook
        hook.install_framework_caps(report=said.append)
        probes = [importlib.util.find_spec("torch") is not None for _ in range(3)]
        probed = "torch" in sys.modules
        import torch
        torch.cuda.init()
        print(json.dumps({"probes": probes, "probed": probed, "calls": torch.calls, "said": said}))
        """,
        CAPPED,
    )
    assert result["probes"] == [True, True, True] and result["probed"] is False  # a probe imports nothing
    assert result["calls"] == [[0.25, 0], [0.5, 1]]  # the real import is capped, once
    assert result["said"] == ["PyTorch capped at 10240 MiB, 20480 MiB per GPU at its CUDA start"]


def test_a_library_that_probes_for_torch_at_import_then_torch(tmp_path: Path) -> None:
    (tmp_path / "probing_lib.py").write_text(
        "import importlib.util\nHAS_TORCH = importlib.util.find_spec('torch') is not None\n"
    )
    result = run(
        tmp_path,
        """
        said = []
        import carma_airflow.taskrun.framework_hook as hook
        hook.install_framework_caps(report=said.append)
        import probing_lib
        import torch
        torch.cuda.init()
        calls = list(torch.calls)
        import torch  # a second import, and a reload, cap nothing more
        import importlib; importlib.reload(torch)
        print(json.dumps({"has": probing_lib.HAS_TORCH, "calls": calls, "said": len(said)}))
        """,
        CAPPED,
    )
    assert result["has"] is True
    assert result["calls"] == [[0.25, 0], [0.5, 1]]
    assert result["said"] == 1


def test_a_framework_imported_before_the_hook_says_so(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        import torch
        said = []
        import carma_airflow.taskrun.framework_hook as hook
        hook.install_framework_caps(report=said.append)
        print(json.dumps({"said": said}))
        """,
        CAPPED,
    )
    said = [str(s) for s in result["said"]]  # type: ignore[attr-defined]
    assert len(said) == 1 and said[0].startswith("torch was imported before the cap hook was installed")
    assert "PyTorch capped at 10240 MiB, 20480 MiB per GPU" in said[0]


def test_a_framework_imported_past_the_hook_is_capped_late_and_says_so(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        import importlib.machinery
        said = []
        import carma_airflow.taskrun.framework_hook as hook
        hook.install_framework_caps(report=said.append)
        class Ahead:  # a finder put ahead of ours after the hook was installed
            @staticmethod
            def find_spec(name, path, target=None):
                if name != "torch":
                    return None
                return importlib.machinery.PathFinder.find_spec(name, path, target)
        sys.meta_path.insert(0, Ahead)
        import torch
        before = list(said)
        import email.mime.text  # the next import the hook sees
        torch.cuda.init()
        print(json.dumps({"before": before, "said": said, "calls": torch.calls}))
        """,
        CAPPED,
    )
    assert result["before"] == []
    said = [str(s) for s in result["said"]]  # type: ignore[attr-defined]
    assert len(said) == 1 and said[0].startswith("torch imported past the cap hook")
    assert result["calls"] == [[0.25, 0], [0.5, 1]]


def test_real_torch_is_capped_after_transformers_probed_for_it() -> None:
    """The PyTorch CPU wheel and a real transformers: transformers runs find_spec("torch") at its
    import; the cap is queued for CUDA's start when the task imports torch itself."""
    pytest.importorskip("transformers")
    code = textwrap.dedent(
        """
        import importlib.util, json, sys
        from carma_airflow.taskrun.framework_hook import install_framework_caps
        said = []
        line = install_framework_caps(report=said.append)
        found = importlib.util.find_spec("torch") is not None
        import transformers
        early = "torch" in sys.modules
        import torch
        queued = len(getattr(torch.cuda, "_queued_calls", []))
        print(json.dumps({"line": line, "found": found, "early": early, "said": said, "queued": queued}))
        """
    )
    env = {**os.environ, **CAPPED}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert out.returncode == 0, out.stderr
    result = last_json(out.stdout)
    assert result["found"] is True and result["early"] is False  # transformers only probed
    assert result["said"] == ["PyTorch capped at 10240 MiB, 20480 MiB per GPU at its CUDA start"]
    assert result["queued"] >= 1
