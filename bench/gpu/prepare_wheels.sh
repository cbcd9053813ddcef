#!/usr/bin/env bash
# Download Apache Airflow 3.3.2 and carma-airflow's Airflow dependencies as wheels for the GPU
# machines (CPython 3.12, manylinux x86_64, no package index there), into a gitignored folder.
#
#   bench/gpu/prepare_wheels.sh [DEST]        # default DEST: bench/gpu/wheels
#
# Run it where pip can reach PyPI.  Versions follow constraints.txt where it pins them.
# Wheels of packages the GPU machines' image already has (PyTorch, the nvidia-* CUDA libraries,
# numpy, pandas, matplotlib, rich, ...) are deleted afterwards when over 1 MiB (small ones stay
# as a fallback should the image's version fall outside Airflow's range); bench/gpu/run.sh
# installs with `pip install --no-index --find-links`, so an installed package that satisfies
# Airflow's range is kept as it is.  Prints the folder's size: carry it (bench/gpu/wheels) to
# the GPU machine with the working tree; everything carried must stay under 64 MiB.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DEST="${1:-$HERE/wheels}"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="python3"; fi
fi

# Packages the GPU machines' image ('cuda', read 2026-11-17) already holds: never carried.
# Names are normalised (lower case, '-' for '_' and '.').
PREINSTALLED="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio
h11 h5py hf-xet httpcore httpx humanize hypothesis idna imageio iniconfig interface-meta jax
jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil
pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark
pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels
sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp"

mkdir -p "$DEST"
# constraints.txt pins the versions CI tests; drop the pins of packages we do not carry (the GPU
# image has its own torch/numpy/... versions) and of tools that are no runtime dependency.
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
"$PY" - "$ROOT/constraints.txt" "$PREINSTALLED" >"$CONSTRAINTS" <<'PYEOF'
import re
import sys

skip = set(sys.argv[2].split())
for line in open(sys.argv[1]):
    name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0]
    norm = re.sub(r"[-_.]+", "-", name).lower()
    if name and not line.startswith("#") and norm not in skip:
        print(line.rstrip())
PYEOF

echo "prepare_wheels: pip download apache-airflow==3.3.2 and carma-airflow's Airflow deps for CPython 3.12 x86_64 into $DEST"
"$PY" -m pip download --quiet --disable-pip-version-check --dest "$DEST" -c "$CONSTRAINTS" \
  --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform linux_x86_64 --platform any \
  "apache-airflow==3.3.2" "pydantic>=2.6" "sqlalchemy>=2.0" "alembic>=1.13" 2> >(grep -v "is ignored: it is neither" >&2)

removed=0
for whl in "$DEST"/*.whl; do
  [[ -e "$whl" ]] || continue
  base="$(basename "$whl")"
  norm="$(echo "${base%%-[0-9]*}" | tr 'A-Z_.' 'a-z--')"
  size_kib="$(du -k "$whl" | cut -f1)"
  if [[ "$norm" == nvidia-* || "$norm" == torch || ( " $(echo $PREINSTALLED) " == *" $norm "* && size_kib -gt 1024 ) ]]; then
    rm -f "$whl"
    removed=$((removed + 1))
  fi
done
count="$(find "$DEST" -name '*.whl' | wc -l)"
size_mib="$(du -sm "$DEST" | cut -f1)"
echo "prepare_wheels: $count wheels, ${size_mib} MiB in $DEST ($removed large ones already on the GPU image left out)"
if (( size_mib > 56 )); then
  echo "prepare_wheels: warning: over 56 MiB; with the working tree this may pass the 64 MiB carry limit (use run.sh --mode light)"
fi
