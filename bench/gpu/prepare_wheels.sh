#!/usr/bin/env bash
# The wheelhouse for Airflow mode on the GPU machines (CPython 3.12, manylinux x86_64, no package
# index there): carma-airflow's own wheel (built from this tree), Apache Airflow 3.3.2 and what
# Airflow mode needs (pydantic, SQLAlchemy, alembic) with all their dependencies, into a
# gitignored folder.
#
#   bench/gpu/prepare_wheels.sh [DEST]          # default DEST: bench/gpu/wheels (what the device call carries)
#   bench/gpu/prepare_wheels.sh --full [DEST]   # every wheel, none left out: what a bare Python 3.12 needs
#                                               # (tests/gpu/test_offline_install.py installs from it)
#
# Run it where pip can reach PyPI (or its cache), right before the device call: the project's
# wheel is built from the tree as it is now.  Versions follow constraints.txt where it pins them.
# Without --full, wheels of packages the GPU machines' image already has (PyTorch, the nvidia-*
# CUDA libraries, numpy, pandas, matplotlib, rich, ...) are deleted when over 1 MiB (small ones
# stay as a fallback should the image's version fall outside Airflow's range); bench/gpu/run.sh
# installs with `pip install --no-index --find-links`, so an installed package that satisfies the
# range is kept as it is.  Only Airflow mode's needs are fetched, not the `airflow` extra's
# (PostgreSQL's psycopg, Celery, Redis and StatsD serve other deployments; the kit runs SQLite and
# local dispatch).  Prints the folder's size and, with the working tree, what a device call would
# carry: everything carried must stay under 64 MiB.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
full=0
if [[ "${1:-}" == "--full" ]]; then full=1; shift; fi
DEST="${1:-$HERE/wheels}"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="python3"; fi
fi
# What Airflow mode installs (bench/gpu/run.sh installs the same list): carma-airflow itself and
# its runtime dependencies, Airflow 3.3.2, and what CarmaExecutor imports beside Airflow.
REQUIREMENTS=("apache-airflow==3.3.2" "pydantic>=2.6" "sqlalchemy>=2.0" "alembic>=1.13" "nvidia-ml-py>=12")

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

rm -rf "$DEST"
mkdir -p "$DEST"
# constraints.txt pins the versions CI tests; drop the pins of packages we do not carry (the GPU
# image has its own torch/numpy/... versions) and of tools that are no runtime dependency.
# With --full every pin stays (the rehearsal's bare Python gets what CI tests).
CONSTRAINTS="$(mktemp)"
BUILD="$(mktemp -d)"
trap 'rm -f "$CONSTRAINTS"; rm -rf "$BUILD"' EXIT
"$PY" - "$ROOT/constraints.txt" "$( ((full)) || echo "$PREINSTALLED")" >"$CONSTRAINTS" <<'PYEOF'
import re
import sys

skip = set(sys.argv[2].split())
for line in open(sys.argv[1]):
    name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0]
    norm = re.sub(r"[-_.]+", "-", name).lower()
    if name and not line.startswith("#") and norm not in skip:
        print(line.rstrip())
PYEOF

# carma-airflow's own wheel, built from a copy of this tree's files (tracked and untracked, not the
# ignored ones; setuptools' scratch folders stay out of the checkout), without build isolation:
# the build needs setuptools>=77, which the project's .venv has, and no index.
(cd "$ROOT" && git ls-files -z -c -o --exclude-standard | xargs -0 cp --parents -t "$BUILD" 2>/dev/null) || true
[[ -f "$BUILD/pyproject.toml" && -d "$BUILD/carma_airflow" ]] ||
  { echo "error: could not copy $ROOT's files to build carma-airflow's wheel (is it a git checkout?)" >&2; exit 2; }
"$PY" -m pip wheel --quiet --isolated --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$DEST" "$BUILD" >/dev/null
project="$(ls "$DEST"/carma_airflow-*.whl)"

echo "prepare_wheels: pip download $(basename "$project")'s dependencies, ${REQUIREMENTS[*]} for CPython 3.12 x86_64 into $DEST"
# --isolated: this machine's pip configuration (extra indexes, find-links, constraints) stays out
"$PY" -m pip --isolated download --quiet --disable-pip-version-check --dest "$DEST" -c "$CONSTRAINTS" \
  --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform linux_x86_64 --platform any \
  "$project" "${REQUIREMENTS[@]}" 2> >(grep -v "is ignored: it is neither" >&2)

removed=0
for whl in $( ((full)) || echo "$DEST"/*.whl); do
  [[ -e "$whl" ]] || continue
  base="$(basename "$whl")"
  norm="$(echo "${base%%-[0-9]*}" | tr 'A-Z_.' 'a-z--')"
  size_kib="$(du -k "$whl" | cut -f1)"
  if [[ "$norm" == nvidia-* && "$norm" != nvidia-ml-py || "$norm" == torch || ( " $(echo $PREINSTALLED) " == *" $norm "* && size_kib -gt 1024 ) ]]; then
    rm -f "$whl"
    removed=$((removed + 1))
  fi
done
count="$(find "$DEST" -name '*.whl' | wc -l)"
wheels_kib="$(du -sk "$DEST" | cut -f1)"
tree_kib="$(cd "$ROOT" && { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -ckL 2>/dev/null | tail -1 | cut -f1)"
carry_kib=$((wheels_kib + tree_kib))
what="$( ((full)) && echo "every wheel a bare Python 3.12 needs" || echo "$removed large ones already on the GPU image left out")"
echo "prepare_wheels: $count wheels, $((wheels_kib / 1024)) MiB (${wheels_kib} KiB) in $DEST ($what)"
echo "prepare_wheels: a device call carrying it: working tree $((tree_kib / 1024)) MiB + wheels = $((carry_kib / 1024)) MiB of 64 MiB"
if ((full == 0 && carry_kib > 60 * 1024)); then
  echo "prepare_wheels: warning: over 60 MiB with the working tree; the device call may pass the 64 MiB carry limit (use run.sh --mode light)" >&2
  exit 1
fi
