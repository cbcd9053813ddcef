"""NVML is touched only when an NVML probe first samples (import checks: tests/test_layering.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "carma_airflow"


def test_creating_an_nvml_probe_does_not_touch_nvml() -> None:
    code = (
        "import sys\n"
        "from carma_airflow.monitor import make_probe\n"
        "probe = make_probe('nvml', '', None)\n"
        "probe.close()\n"
        "print('pynvml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_only_nvml_module_mentions_nvml_or_cuda_libraries() -> None:
    sources = [*sorted((PACKAGE / "monitor").glob("*.py")), PACKAGE / "taskrun" / "simulated_training.py"]
    patterns = (r"\bimport\s+(airflow|sqlalchemy|torch)", r"\bfrom\s+(airflow|sqlalchemy|torch)\b", "libcuda")
    for path in sources:
        text = path.read_text()
        for forbidden in patterns:
            assert not re.search(forbidden, text), f"{path.name} matches {forbidden}"
        if path.name != "nvml.py":
            assert "pynvml" not in text, f"{path.name} mentions pynvml: only monitor/nvml.py may touch NVML"
