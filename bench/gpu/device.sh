#!/usr/bin/env bash
# The one prepared device call (docs/gpu-kit.md, "The device call"): on a GPU machine lent for a
# few minutes, everything the kit can show about the executor itself, under a deadline, written
# under $OUT as at most 8 files (what the device tool brings back):
#
#   bench/gpu/device.sh              # on the GPU machine ($OUT set by the device tool)
#   bench/gpu/device.sh --dry-run    # anywhere: simulated GPUs, the same steps (tests/gpu/test_offline_install.py)
#   bench/gpu/device.sh --out DIR    # where to write (default $OUT, else out/device)
#
# Steps, in this order, each skipped with a line when the deadline (DEVICE_BUDGET_S, default
# 420 s: a call of at most 8 minutes with a minute to spare) leaves it too little time:
#   1. the machine: GPU, driver, Python, PyTorch (device.log)
#   2. NVML's cost per call kind, nvml_detail_every 1 against the default (nvml-cost.json)
#   3. Airflow mode, installed offline from bench/gpu/wheels: the kit's DAG under exclusive,
#      most-free-memory and completion-time (the default), side by side (compare.json,
#      figures.json, timeline.png; evidence and try logs in airflow-work.tgz)
#   4. the fence check (fence.log)
# Exit 0 when every step that ran passed; 1 when one failed; 2 for bad arguments.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
dry=0
dest="${OUT:-$ROOT/out/device}"
while (($#)); do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --out) dest="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (--dry-run, --out DIR)" >&2; exit 2 ;;
  esac
done
mkdir -p "$dest" || { echo "error: cannot write to $dest" >&2; exit 2; }
dest="$(cd "$dest" && pwd)"
BUDGET="${DEVICE_BUDGET_S:-420}"
POLICIES="${DEVICE_POLICIES:-exclusive,most-free-memory,completion-time}"
SCALE="${DEVICE_SCALE:-0.2}"            # the tasks' training time; CUDA's start (~9 s a try) is not scaled
POLICY_TIMEOUT="${DEVICE_POLICY_TIMEOUT_S:-170}"
work="$(mktemp -d "${TMPDIR:-/tmp}/carma-device.XXXXXX")"
started=$SECONDS
failed=0
dryflag=()
((dry)) && dryflag=(--dry-run)

exec > >(tee "$dest/device.log") 2>&1

left() { echo $((BUDGET - (SECONDS - started))); }
# step NAME NEEDS_S COMMAND...: run COMMAND under what is left of the deadline, or say why not
step() {
  local name="$1" needs="$2" rc
  shift 2
  if (($(left) < needs)); then
    echo "[device] $name: skipped: $(left) s of the ${BUDGET} s budget left, it needs ${needs} s"
    return 0
  fi
  echo "[device] $name: start ($(left) s left)"
  local t0=$SECONDS
  timeout --kill-after=10 "$(left)" "$@"
  rc=$?
  echo "[device] $name: exit $rc after $((SECONDS - t0)) s"
  if ((rc != 0)); then failed=1; fi
  return 0
}

machine() {
  date -u +"utc %FT%TZ"
  uname -srm
  if ((dry)); then echo "dry run: simulated GPUs (${DEVICE_SIM_GPUS:-1xH200-141GB})"; else nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; fi
  python3 -c 'import sys; print("python3", sys.version.split()[0], sys.executable)'
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "torch: not importable"
  local wheels="${CARMA_GPU_WHEELS:-$HERE/wheels}"
  echo "wheels: $(ls "$wheels"/*.whl 2>/dev/null | wc -l) in $wheels ($(du -sm "$wheels" 2>/dev/null | cut -f1) MiB)"
}

airflow_mode() {
  local out="$work/airflow"
  local extra=()
  ((dry)) && extra=(--dry-run --sim-gpus "${DEVICE_SIM_GPUS:-1xH200-141GB}")
  bench/gpu/run.sh --mode airflow ${extra[@]+"${extra[@]}"} --policies "$POLICIES" \
    --scale "$SCALE" --timeout "$POLICY_TIMEOUT" --out "$out"
  local rc=$?
  for f in compare.json figures.json timeline.png; do [[ -f "$out/$f" ]] && cp "$out/$f" "$dest/$f"; done
  # every try's log, result and evidence, carma's stores and the Airflow logs: one file
  [[ -d "$out" ]] && tar -C "$out" -czf "$dest/airflow-work.tgz" \
    --exclude='*/dags' --exclude='*.pyc' --exclude='*/airflow.db' . 2>/dev/null
  return $rc
}

cd "$ROOT" || exit 2
export work dest dry HERE POLICIES SCALE POLICY_TIMEOUT
echo "[device] carma GPU kit, device call: budget ${BUDGET} s, policies ${POLICIES}, scale ${SCALE}$( ((dry)) && echo ', DRY RUN')"
step machine 5 bash -c "$(declare -f machine); machine"
step nvml-cost 30 bench/gpu/run.sh nvml-cost ${dryflag[@]+"${dryflag[@]}"} --out "$work/nvml"
[[ -f "$work/nvml/nvml-cost.json" ]] && cp "$work/nvml/nvml-cost.json" "$dest/"
step airflow-mode 240 bash -c "$(declare -f airflow_mode); airflow_mode"
step fence 75 bash -c "set -o pipefail; bench/gpu/run.sh fence ${dryflag[*]} 2>&1 | tee '$dest/fence.log'"
rm -rf "$work"
echo "[device] done in $((SECONDS - started)) s of ${BUDGET} s (exit $failed); files: $(cd "$dest" && ls | tr '\n' ' ')"
exit $failed
