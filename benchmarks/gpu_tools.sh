#!/usr/bin/env bash
# ircore verify, ircore bench and the pytest plugin on a GPU machine, from the repo root, $OUT set:
#   bash benchmarks/gpu_tools.sh
# Installs the core and both providers (not editable, no ahead-of-time build: vllm_c builds its
# kernels on first use into $IRCORE_CACHE_DIR, shared with gpu_run.sh) into /tmp/site_tools, then
# runs, each with its own time cap: `ircore verify` (every provider, cpu + cuda), `ircore bench
# --write-config` (default GPU shapes, eager and CUDA-graph timing), the plugin
# (`pytest --ircore-provider ...`) and the providers' tools tests. Logs and JSON go to $OUT.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export IRCORE_CACHE_DIR=${IRCORE_CACHE_DIR:-/tmp/ircore_cache}
SITE=/tmp/site_tools
STATUS=0
note() { echo "== $* ($(date +%H:%M:%S))" | tee -a "$OUT/gpu_tools.log"; }
step() {  # step NAME SECONDS COMMAND...: run with a cap, log to $OUT/NAME.log, remember a failure
  local name=$1 cap=$2; shift 2
  note "$name"
  timeout "$cap" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc"
  [ "$rc" -ne 0 ] && [ "$STATUS" -eq 0 ] && STATUS=$rc
  return 0
}

rm -rf "$SITE"
if ! IRCORE_NO_BUILD=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index --no-compile \
    --target "$SITE" . ./providers/vllm_c ./providers/triton >"$OUT/tools_install.log" 2>&1; then
  note "installing the core and providers into $SITE FAILED (see tools_install.log)"; exit 1
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d)
cd "$WORK" || exit 1   # no source tree on the path: the installed copies run

step tools_list 600 python3 -m ircore list
step tools_verify 600 sh -c "python3 -m ircore verify --json > '$OUT/verify.json'"
step tools_bench 600 sh -c "python3 -m ircore bench --json --write-config '$OUT/ircore.toml' > '$OUT/bench.json'"
step tools_bench_text 300 python3 -m ircore bench --op rms_norm --shape 16x4096 4096x4096 --rounds 9
step tools_list_config 120 env IRCORE_CONFIG="$OUT/ircore.toml" python3 -m ircore list
step tools_plugin 600 python3 -m pytest -p no:cacheprovider -q --ircore-provider vllm_c --ircore-provider triton \
  --ircore-device cuda
cd "$ROOT" || exit 1
step tools_tests 600 python3 -m pytest -p no:cacheprovider -q providers/vllm_c/tests/test_tools.py
step tools_tests_triton 600 python3 -m pytest -p no:cacheprovider -q providers/triton/tests/test_tools.py
note "done, status $STATUS"
exit "$STATUS"
