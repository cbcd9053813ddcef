#!/usr/bin/env bash
# carma's real-GPU validation kit, one command (see bench/gpu/README.md):
#
#   bench/gpu/run.sh                  # real GPU: Airflow mode if its wheels are here, else light mode
#   bench/gpu/run.sh --mode light     # placer + monitor + task processes, no Airflow
#   bench/gpu/run.sh --mode airflow   # Airflow 3.3 + CarmaExecutor (installs bench/gpu/wheels offline)
#   bench/gpu/run.sh --dry-run        # simulated GPUs, carma's synthetic workload (CI runs this)
#   bench/gpu/run.sh --out DIR        # figures.json, timeline.png, summary.txt (default out/gpu-kit)
#   bench/gpu/run.sh fence [--dry-run]  # the CUDA context per GPU model, then fenced collocation: two
#                                      # processes, one grows past its cap (framework, live, driver, none, mps)
#
# Runs the kit's tasks with the exclusive policy, then with interference-aware, and prints the
# figures.  Without an NVIDIA GPU (and without --dry-run) it says so in one line and exits 0.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
mode=auto
dry=0
cmd=run
args=()
while (($#)); do
  case "$1" in
    fence) cmd=fence; shift ;;
    --mode) mode="$2"; shift 2 ;;
    --mode=*) mode="${1#--mode=}"; shift ;;
    --dry-run) dry=1; args+=("$1"); shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
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

has_airflow() { "$PY" -c "import airflow.executors, carma_airflow.executor" >/dev/null 2>&1; }
install_airflow() {
  local wheels="$HERE/wheels"
  if ! ls "$wheels"/apache_airflow-3.3.2-*.whl >/dev/null 2>&1; then
    echo "[kit] no Airflow wheels in $wheels (run bench/gpu/prepare_wheels.sh where PyPI is reachable)"
    return 1
  fi
  echo "[kit] installing Airflow 3.3.2 from $wheels ($(du -sm "$wheels" | cut -f1) MiB) and carma-airflow, offline"
  "$PY" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" \
    "apache-airflow==3.3.2" "pydantic>=2.6" "sqlalchemy>=2.0" "alembic>=1.13" &&
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation -e "$ROOT"
}

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
