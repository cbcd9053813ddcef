#!/usr/bin/env bash
# carma's real-GPU validation kit, one command (see bench/gpu/README.md):
#
#   bench/gpu/run.sh                  # real GPU: Airflow mode if its wheels are here, else light mode
#   bench/gpu/run.sh --mode light     # placer + monitor + task processes, no Airflow
#   bench/gpu/run.sh --mode airflow   # Airflow 3.3 + CarmaExecutor (installs bench/gpu/wheels offline)
#   bench/gpu/run.sh --dry-run        # simulated GPUs, carma's synthetic workload (CI runs this)
#   bench/gpu/run.sh --out DIR        # figures.json, timeline.png, summary.txt (default out/gpu-kit)
#   bench/gpu/run.sh --policies exclusive,most-free-memory,completion-time   # side by side (compare.txt)
#   bench/gpu/run.sh --wheels DIR     # Airflow mode's offline wheelhouse (default bench/gpu/wheels)
#   bench/gpu/run.sh fence [--dry-run]  # the CUDA context per GPU model, then fenced collocation: two
#                                      # processes, one grows past its cap (framework, live, driver, none, mps)
#   bench/gpu/run.sh nvml-cost [--dry-run] [--out DIR]  # NVML calls and CPU per call kind, per GPU-second
#
# Runs the kit's tasks with the exclusive policy, then with interference-aware (or --policies), and
# prints the figures.  Without an NVIDIA GPU (and without --dry-run) it says so in one line and exits 0.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
mode=auto
dry=0
WHEELS="${CARMA_GPU_WHEELS:-$HERE/wheels}"
cmd=run
args=()
while (($#)); do
  case "$1" in
    fence) cmd=fence; shift ;;
    nvml-cost) cmd=nvml-cost; shift ;;
    --mode) mode="$2"; shift 2 ;;
    --mode=*) mode="${1#--mode=}"; shift ;;
    --dry-run) dry=1; args+=("$1"); shift ;;
    --wheels) WHEELS="$2"; shift 2 ;;
    --wheels=*) WHEELS="${1#--wheels=}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$mode" in auto|light|airflow) ;; *) echo "error: --mode is auto, light or airflow, not '$mode'" >&2; exit 2 ;; esac

# The interpreter: $PYTHON; for a dry run the project's .venv; else the python3 that has PyTorch
# (the GPU machines' image), else the .venv.
if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ $dry == 1 && -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null && python3 -c "import torch" 2>/dev/null; then
  PY="$(command -v python3)"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="python3"
fi
export PYTHONPATH="$HERE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

if [[ $dry == 0 ]]; then
  set +e
  line="$("$PY" -m gpukit check 2>&1)"
  rc=$?
  set -e
  if [[ $rc == 3 ]]; then echo "$line"; exit 0; fi
  if [[ $rc != 0 ]]; then echo "error: the GPU check failed: ${line##*$'\n'}" >&2; exit 2; fi
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "[kit] PyTorch with CUDA is missing for $PY; installing it (needs a package index)"
    "$PY" -m pip install -q torch || { echo "error: no CUDA build of PyTorch for $PY and none could be installed" >&2; exit 2; }
  fi
fi

# Installed, not merely importable through PYTHONPATH: Airflow finds carma's executor, plugin,
# provider and cluster policy through its distribution's entry points.
has_airflow() {
  env -u PYTHONPATH "$PY" -c "import airflow.executors, importlib.metadata as m; m.version('carma-airflow')" >/dev/null 2>&1
}
# Offline, from the wheelhouse alone (--isolated: no pip configuration or PIP_* variable adds an
# index or another folder): carma-airflow's wheel (prepare_wheels.sh built it from this tree;
# PYTHONPATH still puts the tree's code first) and what Airflow mode needs, the list
# prepare_wheels.sh downloads for.
install_airflow() {
  local wheels="$WHEELS" started=$SECONDS
  if ! ls "$wheels"/apache_airflow-3.3.2-*.whl >/dev/null 2>&1; then
    echo "[kit] no Airflow wheels in $wheels (run bench/gpu/prepare_wheels.sh where PyPI is reachable)"
    return 1
  fi
  local project=("carma-airflow")
  if ! ls "$wheels"/carma_airflow-*.whl >/dev/null 2>&1; then
    echo "[kit] no carma-airflow wheel in $wheels: installing it from the tree (needs setuptools>=77 here)"
    project=()
  fi
  echo "[kit] installing Airflow 3.3.2 and carma-airflow from $wheels ($(du -sm "$wheels" | cut -f1) MiB), offline, into $PY"
  # without PYTHONPATH: the checkout's own carma_airflow.egg-info (where one was built) must not
  # pass for an installed carma-airflow
  env -u PYTHONPATH "$PY" -m pip --isolated install -q --disable-pip-version-check --no-index --find-links "$wheels" \
    ${project[@]+"${project[@]}"} "apache-airflow==3.3.2" "pydantic>=2.6" "sqlalchemy>=2.0" "alembic>=1.13" \
    "nvidia-ml-py>=12" || return 1
  if ((${#project[@]} == 0)); then
    env -u PYTHONPATH "$PY" -m pip --isolated install -q --disable-pip-version-check --no-index --no-deps \
      --no-build-isolation -e "$ROOT" ||
      return 1
  fi
  echo "[kit] installed offline in $((SECONDS - started)) s"
}

if [[ $cmd == nvml-cost ]]; then  # NVML's cost per call kind: gpukit/nvml_cost.py
  exec "$PY" -m gpukit nvml-cost ${args[@]+"${args[@]}"}
fi
if [[ $cmd == fence ]]; then  # no Airflow, no figures: gpukit/fence_check.py
  set +e
  "$PY" -m gpukit fence $([[ $dry == 1 ]] && echo --dry-run)
  rc=$?
  set -e
  echo "[kit] fence check finished (exit $rc)"
  exit $rc
fi

if [[ $mode == auto ]]; then
  if [[ $dry == 1 ]]; then mode=light
  elif has_airflow; then mode=airflow
  elif install_airflow && has_airflow; then mode=airflow
  else echo "[kit] Airflow is not available here: light mode (same placer, monitor and task launch, no Airflow)"; mode=light
  fi
elif [[ $mode == airflow ]] && ! has_airflow; then
  install_airflow && has_airflow || { echo "error: Airflow mode needs Airflow 3.3 and carma-airflow installed (bench/gpu/wheels)" >&2; exit 2; }
fi

started=$(date +%s)
set +e
"$PY" -m gpukit run --mode "$mode" ${args[@]+"${args[@]}"}
rc=$?
set -e
echo "[kit] $mode mode finished in $(( $(date +%s) - started )) s (exit $rc)"
exit $rc
