#!/usr/bin/env bash
# The one command to run on the GPU machine, from the repo root, with $OUT set:
#   bash benchmarks/gpu_run.sh [all|tests|tests-triton|bench|compile|transformers|...] (default: all)
# Installs the carried wheels (.whl/) into /tmp/site, then (a) the GPU tests (below; one 10-minute
# call), (b) benchmarks/kernels_gpu.py with the no-PDL columns (~8 min cap), (compile) the compile-path
# tests and benchmarks/e2e_decoder.py (~9 min), or (transformers) the Hugging Face tests and
# benchmarks/e2e_transformers.py (~6 min; Liger-Kernel from .whl/; E2E_MODEL=qwen3_moe: the
# Qwen3-MoE-shaped model instead of the Llama, not yet run on a GPU). Step logs, JSON and markdown go
# to $OUT (set-up logs to $SETUP). (session, ~9 min) a short pass over many checks in one call: every
# provider's `ircore list` reason here, the DTensor tests on nccl, e2e_transformers, the
# CUDA-graph path of `ircore bench`, the fp32-overflow and bad-input tests on torch 2.11.
# (pdl, ~7 min) the core fast-path tests on Python 3.12 / torch 2.11, both providers' GPU tests
# (PDL on), and vllm_c's launch sweep at T <= 1024 with PDL on and off. (checks, ~5 min) the
# automatic-config and PDL tests, the bad-input matrix on CPU and CUDA tensors and the DTensor
# tests on nccl, with room for the compiled variant's Inductor build. (tune, ~8 min) the norm
# rows at T = 128 and 1024 (where the providers are closest to the anchors) side by side with
# the anchors, then triton's and vllm_c's launch sweeps at those rows. (profile, ~5 min) Nsight Compute counters for those rows (ours, Inductor,
# Liger), then both providers' PDL and forced-config GPU tests. (remeasure, ~9 min) triton's GPU
# tests (SKIP_TESTS=1: not), then benchmarks/kernels_gpu.py over every row, graph replay only
# (no no-PDL columns).
# (gpu-tests, wave2-kernels, quant-kernels, quant-profile, fp8-matmul, e2e-llama, e2e-moe, e2e-decoder, invariance, fp8-host) the wave-2
# steps, chainable in one call and capped together by CALL_BUDGET_S (see the end of this file and
# benchmarks/README.md); their JSON and markdown come back in $OUT/results.tgz.
# A failing step does not stop the next one; the exit status is the first failure's.
#
# (tests, tests-triton) The GPU pass, in two 10-minute device calls (one no longer holds it: the
# suites took ~480 s on 2026-12-04, with ~65 s of set-up): `tests` runs the core, vllm_c and the
# stand-in providers, `tests-triton` the triton provider. Each installs the core and every provider
# editable (the `ircore list` and `ircore verify` tests need their entry points), then runs one
# pytest process per suite, as `make test` runs them, each with `-m "gpu or not slow"`: the fast tier
# (`make test-fast`) plus the tests marked gpu, whether slow or not. That is vllm_c's test_cuda.py,
# triton's test_gpu.py, both providers' test_kernels.py and conformance kits on the GPU, `ircore
# verify` and `ircore bench` on CUDA, the bad-input matrix on CUDA tensors, the CUDA-graph compile
# test, and the stand-in providers' report of this real machine. Left out are the CPU-only slow
# tests: fresh interpreters over fixture providers, Inductor on CPU tensors, gloo, wheel and venv
# builds, the sm_90 nvcc and ptxas builds that need no GPU; CI runs them all (`make test`), and the
# whole core suite alone took over 280 s here. DTensor on nccl has its own passes (session, checks).
# Each pytest runs under `timeout`, its cap cut to what is left of TESTS_BUDGET_S (default 570 s
# from this script's start), so one hang costs its own cap and never the call; a step with under
# 20 s left is skipped (status 124). Each suite ends with a time line, and gpu_run.log with a table
# of them. aiter, oink and xpu share one log (the device brings back 8 files).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
WHAT=${1:-all}
WHATS=" ${*:-all} "  # the wave-2 steps below may be chained in one call: gpu-tests wave2-kernels ...
MODES="all tests tests-triton bench compile transformers session pdl checks tune profile remeasure gpu-tests wave2-kernels quant-kernels quant-profile fp8-matmul e2e-llama e2e-moe e2e-decoder invariance fp8-host"
for w in $WHATS; do
  case " $MODES " in *" $w "*) ;; *) echo "usage: bash benchmarks/gpu_run.sh [MODE ...], MODE one of: $MODES" >&2; exit 2 ;; esac
done
want() { case "$WHATS" in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${OUT:-$ROOT/gpu_out}
# Set-up logs (pip, builds, the environment) go to $SETUP, not $OUT: the device tool brings back
# at most 8 files, and those should be the measurements; a failing set-up step says where to look.
SETUP=${SETUP:-/tmp/gpu_run_setup}
mkdir -p "$OUT" "$SETUP"
export PYTHONUNBUFFERED=1
export IRCORE_CACHE_DIR=${IRCORE_CACHE_DIR:-/tmp/ircore_cache}   # vllm_c JIT builds, shared by tests and bench
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/ircore_flashinfer_ws}
mkdir -p "$IRCORE_CACHE_DIR" "$FLASHINFER_WORKSPACE_BASE"
STATUS=0
note() { echo "== $* ($(date +%H:%M:%S))" | tee -a "$OUT/gpu_run.log"; }
# A warm machine keeps /tmp between calls: a set-up step whose inputs are unchanged since the last
# call (same digest) is skipped, saving about a minute per call (the editable installs alone ~45 s).
done_before() {  # done_before NAME DIGEST: true if the step NAME last ran with DIGEST
  [ -f "$SETUP/$1.stamp" ] && [ "$(cat "$SETUP/$1.stamp")" = "$2" ]
}

# Carried wheels (liger-kernel, flashinfer-python, apache-tvm-ffi): without them the benchmark
# still runs, with those columns marked n/a.
SITE=/tmp/site
WHEELS_DIGEST=$(ls -l .whl 2>/dev/null | sha1sum | cut -c1-16)
if ls .whl/*.whl >/dev/null 2>&1 && done_before wheels "$WHEELS_DIGEST"; then
  note "wheels in $SITE from an earlier call (warm machine)"
elif ls .whl/*.whl >/dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
      >"$SETUP/pip_install.log" 2>&1; then
    note "installed $(ls .whl/*.whl | wc -l) wheels into $SITE"; echo "$WHEELS_DIGEST" >"$SETUP/wheels.stamp"
  else
    note "pip install of .whl/ FAILED (see $SETUP/pip_install.log); continuing without them"; STATUS=1
  fi
else
  note "no .whl/ folder: Liger and FlashInfer columns will be n/a"
fi
# The core from the repo root; the providers' tests and kernels_gpu.py put their provider
# folders on sys.path themselves (the core tests want no provider importable).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -d "$SITE" ]; then export PYTHONPATH="$PYTHONPATH:$SITE"; fi
# transformers as ircore supports it (pyproject: >=5.22,<5.24), carried in .whl/transformers/ with
# the huggingface-hub it needs: the image ships 5.17, whose MoE experts loop is no form `apply`
# knows. Installed apart and put first on the path only if it imports and builds a model here;
# otherwise the image's stays (the e2e tables say which version ran).
SITE_TF=/tmp/site-tf
TF_DIGEST=$(ls -l .whl/transformers 2>/dev/null | sha1sum | cut -c1-16)
tf_ok() { PYTHONPATH="$SITE_TF:$PYTHONPATH" python3 -c "import transformers as t; from transformers import LlamaConfig, LlamaForCausalLM; LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=128)); print(t.__version__)" 2>>"$SETUP/transformers_check.log"; }
if ls .whl/transformers/*.whl >/dev/null 2>&1; then
  if ! done_before transformers "$TF_DIGEST"; then
    rm -rf "$SITE_TF"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE_TF" .whl/transformers/*.whl \
      >"$SETUP/pip_transformers.log" 2>&1 && echo "$TF_DIGEST" >"$SETUP/transformers.stamp"
  fi
  if TF_VERSION=$(tf_ok); then
    export PYTHONPATH="$SITE_TF:$PYTHONPATH"; note "transformers $TF_VERSION from .whl/transformers (in $SITE_TF)"
  else
    note "transformers from .whl/transformers does not import here (see $SETUP/transformers_check.log): the image's runs"
  fi
fi

# ircore's compiled call-signature helper, built in place against this machine's torch (as
# `pip install --no-build-isolation` does on an install); without it the pure-Python path runs.
SIG_DIGEST=$(cat setup.py ircore/csrc/* 2>/dev/null | sha1sum | cut -c1-16)
if done_before signature "$SIG_DIGEST" && ls ircore/_signature_ext*.so >/dev/null 2>&1; then
  note "ircore's call-signature helper built by an earlier call (warm machine)"
elif python3 setup.py -q build_ext --inplace >"$SETUP/build_signature.log" 2>&1; then
  note "built ircore's call-signature helper: $(python3 -c 'import ircore._signature as s; print(s.signature is not None, s.unavailable_reason)')"
  echo "$SIG_DIGEST" >"$SETUP/signature.stamp"
else
  note "building ircore's call-signature helper FAILED (see $SETUP/build_signature.log); the pure-Python path runs"
fi

{
  nvidia-smi -L 2>&1 || true
  python3 - <<'PY' 2>&1
import importlib, platform
print("python", platform.python_version())
for m in ("torch", "triton", "liger_kernel", "flashinfer", "tvm_ffi", "numpy", "ninja", "setuptools"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print(m, "NOT importable:", type(e).__name__, str(e)[:200])
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available())
PY
  echo "nvcc: $(command -v nvcc || echo none)"; nvcc --version 2>&1 | tail -2 || true
} 2>&1 | tee -a "$OUT/gpu_run.log"

DEADLINE=${CALL_BUDGET_S:-}  # seconds since the start ($SECONDS) by which every step must be over; empty: none
# JSON and markdown of the wave-2 steps: packed into $OUT/results.tgz after each step (the device
# brings back 8 files at most).
RES=${RES:-/tmp/gpu_results}
mkdir -p "$RES"
pack() { tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }
SUMMARY=()
run_step() {  # [--log FILE] name, timeout seconds, command...  (--log: append to $OUT/FILE.log)
  local log=
  if [ "$1" = --log ]; then log=$2; shift 2; fi
  local name=$1 secs=$2; shift 2
  local fresh=$([ -z "$log" ] && echo 1)
  log=$OUT/${log:-$name}.log
  if [ -n "$DEADLINE" ]; then  # the cap, less the 10 s that `timeout -k` may add, within the budget
    local left=$((DEADLINE - SECONDS - 10))
    if [ $left -lt 20 ]; then
      note "$name: SKIPPED, ${left}s left of the budget"
      SUMMARY+=("$(printf '%-16s skipped: out of time' "$name")")
      [ $STATUS -eq 0 ] && STATUS=124
      return 0
    fi
    [ "$secs" -gt $left ] && secs=$left
  fi
  [ -n "$fresh" ] && : >"$log"
  note "$name: start (cap ${secs}s): $(for a in "$@"; do case $a in *' '*) printf "'%s' " "$a" ;; *) printf '%s ' "$a" ;; esac; done)"
  local t0=$SECONDS rc lines
  lines=$(cat "$log" 2>/dev/null | wc -l)
  set -o pipefail
  timeout -k 10 "$secs" "$@" 2>&1 | tee -a "$log"
  rc=$?
  set +o pipefail
  [ $rc -ne 0 ] && echo  # a killed step's last line may lack its newline
  note "$name: rc=$rc in $((SECONDS - t0))s$( { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo ' (TIMED OUT)')"
  # with pytest's closing line ("N passed, ... in Ss") from this step's part of the log, if any
  SUMMARY+=("$(printf '%-16s %4ss  rc=%-3s %s' "$name" $((SECONDS - t0)) $rc "$(tail -n +$((lines + 1)) "$log" \
    | grep -E '^=* ?[0-9]+ (passed|failed|errors?|skipped|deselected)|tests? collected|no tests ran' | tail -1 | tr -d '=')")")
  [ $rc -ne 0 ] && [ $STATUS -eq 0 ] && STATUS=$rc
  return 0
}

# The core and every provider, editable (vllm_c without its ahead-of-time build: its conftest or
# first use builds the kernels).
install_every_provider() {
  local digest
  digest=$( (pwd; cat pyproject.toml setup.py providers/*/pyproject.toml providers/*/setup.py 2>/dev/null) | sha1sum | cut -c1-16)
  if done_before editable "$digest"; then note "ircore and every provider installed editable by an earlier call"; return 0; fi
  IRCORE_VLLM_C_NO_AOT=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    $(for p in providers/*/; do printf -- '-e %s ' "$p"; done) >"$SETUP/pip_editable.log" 2>&1 \
    && { note "installed ircore and every provider editable"; echo "$digest" >"$SETUP/editable.stamp"; } \
    || { note "editable install FAILED (see $SETUP/pip_editable.log)"; STATUS=1; }
}
if [ "$WHAT" = all ] || [ "$WHAT" = tests ] || [ "$WHAT" = tests-triton ]; then
  # The header says what this runs and why. Separate pytest runs: the providers' test folders
  # share module names (test_kernels.py, ...), and the Makefile says what else keeps them apart.
  [ "$WHAT" != all ] && DEADLINE=${TESTS_BUDGET_S:-570}
  install_every_provider
  GPU_PASS=(python3 -m pytest -q -p no:cacheprovider -m "gpu or not slow" -rfE --durations=10)
  if [ "$WHAT" != tests-triton ]; then
    # vllm_c first: its conftest JIT-builds the kernels (cached for the benchmark and the core's
    # bad-input matrix, which loads them).
    run_step tests_vllm_c 240 "${GPU_PASS[@]}" providers/vllm_c/tests
    run_step tests_core 150 "${GPU_PASS[@]}" tests
    : >"$OUT/tests_standins.log"
    for p in aiter oink xpu; do
      run_step --log tests_standins "tests_$p" 60 "${GPU_PASS[@]}" "providers/$p/tests"
    done
  fi
  [ "$WHAT" != tests ] && run_step tests_triton 300 "${GPU_PASS[@]}" providers/triton/tests
  note "per-suite times:"; printf '   %s\n' "${SUMMARY[@]}" | tee -a "$OUT/gpu_run.log"
  DEADLINE=${CALL_BUDGET_S:-}
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  # --pdl-ab: the providers also without programmatic dependent launch, side by side, to show what
  # it is worth at each size
  run_step kernels_gpu 500 python3 benchmarks/kernels_gpu.py --pdl-ab --budget-s 430 \
    --json "$OUT/kernels_gpu.json" --markdown "$OUT/kernels_gpu.md"
fi
# vllm_c's CUDA kernels built (or loaded), its last line saying which
VLLM_C_BUILD=(python3 -c "from ircore_vllm_c import load_kernels; print('vllm_c CUDA build:', load_kernels(cuda=True) or 'ok')")
# The backend is found through the core's torch_dynamo_backends entry point and providers through
# theirs: install the core and both providers editable, as `make setup` does (vllm_c without its
# ahead-of-time build; its CUDA kernels build on first use, here in the background meanwhile).
install_editable() {
  IRCORE_VLLM_C_NO_AOT=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index \
    -e . -e providers/vllm_c -e providers/triton >"$SETUP/pip_editable.log" 2>&1 \
    && note "installed ircore, vllm_c, triton editable" || { note "editable install FAILED (see $SETUP/pip_editable.log)"; STATUS=1; }
  "${VLLM_C_BUILD[@]}" >"$SETUP/vllm_c_build.log" 2>&1 &
  BUILD_PID=$!
}
if [ "$WHAT" = compile ]; then
  install_editable
  run_step tests_compile 240 python3 -m pytest -q -p no:cacheprovider tests/test_compile_passes.py \
    tests/test_compile_api.py tests/test_compile_backend.py tests/test_compile_processes.py
  wait $BUILD_PID; note "$(cat "$SETUP/vllm_c_build.log" | tail -1)"
  python3 -m ircore list >"$OUT/ircore_list.txt" 2>&1
  run_step e2e_decoder 330 python3 benchmarks/e2e_decoder.py --device cuda --dynamic \
    --json "$OUT/e2e_decoder.json" --markdown "$OUT/e2e_decoder.md"
fi
if [ "$WHAT" = transformers ]; then
  # transformers as the image has it (5.17 on the H200 image); the vllm_c build (~55 s) runs while
  # the tests run; the benchmark waits on its lock if it is not done (8 layers, under 5 min).
  # SKIP_TESTS=1: the benchmark only (saves ~1-2 min of device time).
  install_editable
  if [ -z "${SKIP_TESTS:-}" ]; then
    run_step tests_transformers 120 python3 -m pytest -q -p no:cacheprovider tests/test_transformers.py
  fi
  wait $BUILD_PID; note "$(cat "$SETUP/vllm_c_build.log" | tail -1)"
  python3 -m ircore list >"$OUT/ircore_list.txt" 2>&1
  # E2E_MODEL=qwen3_moe: the Qwen3-MoE-shaped model instead of the Llama (8 layers, ~10 GB of experts)
  E2E="e2e_transformers${E2E_MODEL:+_$E2E_MODEL}"
  run_step "$E2E" 330 python3 benchmarks/e2e_transformers.py --device cuda --model "${E2E_MODEL:-llama}" \
    --json "$OUT/$E2E.json" --markdown "$OUT/$E2E.md"
fi
if [ "$WHAT" = session ]; then
  install_every_provider
  "${VLLM_C_BUILD[@]}" >"$SETUP/vllm_c_build.log" 2>&1 &
  BUILD_PID=$!
  python3 -m ircore list --json >"$OUT/ircore_list.json" 2>"$OUT/ircore_list.err"
  run_step tests_distributed 110 python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py
  wait $BUILD_PID; note "$(tail -1 "$SETUP/vllm_c_build.log")"
  run_step e2e_transformers 290 python3 benchmarks/e2e_transformers.py --device cuda --budget-s 200 \
    --json "$OUT/e2e_transformers.json" --markdown "$OUT/e2e_transformers.md"
  run_step bench_graphs 60 python3 -m ircore bench --op rms_norm --shape 16x4096 4096x4096 --rounds 5
  run_step overflow_vllm_c 40 python3 -m pytest -q -p no:cacheprovider providers/vllm_c/tests -k leave_fp32
  run_step overflow_triton 40 python3 -m pytest -q -p no:cacheprovider providers/triton/tests -k leave_fp32
  run_step tests_bad_input 60 python3 -m pytest -q -p no:cacheprovider tests/test_bad_input.py tests/test_signature_cache.py
fi
if [ "$WHAT" = pdl ]; then
  install_editable
  run_step tests_fastpath 50 python3 -m pytest -q -p no:cacheprovider tests/test_priority_blocks.py \
    tests/test_signature_cache.py
  run_step tests_triton 170 python3 -m pytest -q -p no:cacheprovider -rf --tb=short providers/triton/tests
  wait $BUILD_PID; note "$(tail -1 "$SETUP/vllm_c_build.log")"
  run_step sweep_small 100 python3 providers/vllm_c/bench_gpu.py --sweep --pdl both --top 5 \
    --shapes 1x4096 16x4096 128x4096 1024x4096 1x8192 16x8192 128x8192 1024x8192
  run_step tests_vllm_c 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short providers/vllm_c/tests \
    -k "not compiles_for_sm90"  # nvcc without a GPU: CI runs it
fi
if [ "$WHAT" = checks ]; then  # the bad-input matrix on CPU and CUDA tensors, the DTensor tests on nccl
  install_editable
  wait $BUILD_PID; note "$(tail -1 "$SETUP/vllm_c_build.log")"
  run_step tests_auto_config 60 python3 -m pytest -q -p no:cacheprovider -rf --tb=short \
    providers/vllm_c/tests/test_cuda.py -k "automatic_config or pdl"
  run_step tests_bad_input 200 python3 -m pytest -q -p no:cacheprovider -rA --tb=short --durations=5 \
    tests/test_bad_input.py tests/test_pdl_checks.py
  run_step tests_distributed 280 python3 -m pytest -q -p no:cacheprovider -rA --tb=short --durations=5 \
    tests/test_distributed.py
fi
if [ "$WHAT" = tune ]; then  # the rows at T <= 1024 where the providers are closest to the best anchor
  install_editable
  wait $BUILD_PID; note "$(tail -1 "$SETUP/vllm_c_build.log")"
  run_step open_rows 200 python3 benchmarks/kernels_gpu.py --no-do-bench --tokens 128 1024 --hidden 4096 8192 \
    --ops rms_norm fused_add_rms_norm --dtypes bf16 fp16 --json "$OUT/open_rows.json" --markdown "$OUT/open_rows.md"
  run_step sweep_vllm_c 80 sh -c 'for d in bf16 fp16; do python3 providers/vllm_c/bench_gpu.py --sweep --top 6 \
    --dtype $d --ops rms_norm fused_add_rms_norm --shapes 128x4096 1024x4096 128x8192 1024x8192 || exit 1; done'
  run_step sweep_triton 200 sh -c 'for d in bfloat16 float16; do python3 providers/triton/bench_gpu.py --sweep \
    --top 6 --dtype $d --ops rms_norm fused_add_rms_norm --rows 128 1024 --hidden 4096 8192 || exit 1; done'
fi
if [ "$WHAT" = profile ]; then  # Nsight Compute on those rows, then the GPU tests this work touches
  install_editable
  wait $BUILD_PID; note "$(tail -1 "$SETUP/vllm_c_build.log")"
  run_step ncu 200 sh -c "ncu --profile-from-start off --clock-control none --cache-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --csv --page details python3 benchmarks/profile_small_t.py \
    rms_norm:bf16:1024x8192:compile,vllm_c,triton fused_add_rms_norm:fp16:128x8192:liger,vllm_c,triton \
    fused_add_rms_norm:fp16:1024x4096:liger,vllm_c,triton rms_norm:bf16:128x8192:flashinfer,vllm_c,triton \
    > '$OUT/ncu.csv'"
  run_step tests_vllm_c 120 python3 -m pytest -q -p no:cacheprovider -rf --tb=short providers/vllm_c/tests/test_cuda.py
  run_step tests_triton 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short providers/triton/tests
fi
if [ "$WHAT" = remeasure ]; then  # SKIP_TESTS=1: the benchmark only
  if [ -z "${SKIP_TESTS:-}" ]; then
    run_step tests_triton 200 python3 -m pytest -q -p no:cacheprovider -rf --tb=short providers/triton/tests
  fi
  run_step kernels_gpu 290 python3 benchmarks/kernels_gpu.py --no-do-bench --budget-s 250 \
    --json "$OUT/kernels_gpu.json" --markdown "$OUT/kernels_gpu.md"
fi
# ---- Wave-2 steps (issues 24-29), chainable: bash benchmarks/gpu_run.sh gpu-tests wave2-kernels ...
# CALL_BUDGET_S caps the whole call (each step's cap is cut to what is left of it).
left_s() {  # seconds a step may still plan for: $1, cut to what is left of CALL_BUDGET_S less 40 s
  if [ -n "$DEADLINE" ]; then local l=$((DEADLINE - SECONDS - 40)); [ $l -lt $1 ] && { echo $((l > 10 ? l : 10)); return; }; fi
  echo "$1"
}
WAVE_INSTALLED=
wave_install() {  # once per call; a warm machine keeps the installs and the vllm_c build cache
  [ -n "$WAVE_INSTALLED" ] && return 0
  WAVE_INSTALLED=1
  install_every_provider
}
if want gpu-tests; then
  # The GPU-marked tests only (`-m gpu`): the CPU ones run in CI. vllm_c's (its conftest builds
  # the CUDA kernels: nvcc on the CPU cores) and triton's (Triton compiles, CPU-bound) side by side,
  # triton's in three shards: on 2026-12-05 (H200) its whole suite, one process, reached 60% in 420 s.
  # Each failure is printed as it happens (benchmarks/_pytest_instafail.py): a capped suite keeps them.
  wave_install
  # faulthandler_timeout: a test running past 150 s prints every thread's stack (on 2026-12-05 a
  # triton test ran to the 440 s cap with no sign of where)
  GPU_ONLY=(env PYTHONPATH="$ROOT/benchmarks:$PYTHONPATH" python3 -m pytest -q -p no:cacheprovider -p _pytest_instafail -m gpu -rfE --tb=short --durations=15 -o faulthandler_timeout=150)
  # GPU_TESTS_SUITES picks the suites (default both providers, then the core's; triton_tuned below).
  # E2E_BATCHES (e2e-llama, e2e-moe): the decode batch sizes, e.g. 1 (default 1,16,64).
  # MATMUL_M (fp8-matmul): its M values, e.g. 1,16,128,2048 (default 1..8192); MATMUL_CAP_S its cap.
  cap=${GPU_TESTS_CAP_S:-330}
  suites=${GPU_TESTS_SUITES:-vllm_c triton core}
  note "gpu-tests: $suites GPU tests, the providers' side by side (cap ${cap}s each)"
  T=providers/triton/tests
  jobs=()
  case " $suites " in *" vllm_c "*) jobs+=("vllm_c|providers/vllm_c/tests") ;; esac
  # triton in four shards: its conformance kit on CUDA tunes every key it meets (Triton JIT-compiles
  # each candidate: the kit alone ran past 150 s on 2026-12-05, and the shard holding it reached its
  # 480 s cap at about 85%)
  # triton_tuned: only the tuned launches' GPU bit tests (each candidate against the heuristic launch),
  # for a call that measures the kernels next and has no time for triton's whole suite
  # (two processes: on 2026-12-05, one, the gated norm's HW_MATH test compiled past its 210 s cap
  # before the quant candidates' tests ran; -k takes no spaces here, hence "not(quant)")
  case " $suites " in *" triton_tuned "*) jobs+=("triton_tuned_quant|$T/test_tuned_launches.py -k quant"
    "triton_tuned|$T/test_tuned_launches.py -k not(quant)") ;; esac
  case " $suites " in *" triton "*) jobs+=("triton_quant|$T/test_quant_kernels.py" "triton_rope|$T/test_rope_gpu.py"
    "triton_kit|$T/test_conformance.py"
    "triton|$T --ignore=$T/test_quant_kernels.py --ignore=$T/test_rope_gpu.py --ignore=$T/test_conformance.py") ;; esac
  t0=$SECONDS
  # vllm_c's CUDA build first, alone: its nvcc jobs took the 16 cores while the suites ran beside
  # it on 2026-12-05 (H100), and a test process whose ircore discovers the provider builds or waits
  # for the same build (provider.py loads the kernels when it registers)
  case " $suites " in *" vllm_c "*)
    timeout -k 10 "$(left_s 300)" "${VLLM_C_BUILD[@]}" >"$SETUP/vllm_c_build.log" 2>&1
    note "gpu-tests: $(tail -1 "$SETUP/vllm_c_build.log") after $((SECONDS - t0))s" ;;
  esac
  pids=()
  for job in "${jobs[@]}"; do
    name=${job%%|*}
    # shellcheck disable=SC2086  # the paths and --ignore options split on spaces
    timeout -k 10 "$cap" "${GPU_ONLY[@]}" ${job#*|} >"$OUT/tests_$name.log" 2>&1 & pids+=("$name:$!")
  done
  for entry in "${pids[@]}"; do
    name=${entry%%:*}; wait "${entry##*:}"; r=$?
    note "gpu-tests: $name rc=$r ($(tail -1 "$OUT/tests_$name.log")) after $((SECONDS - t0))s"
    [ "$r" -ne 0 ] && [ $STATUS -eq 0 ] && STATUS=$r
  done
  # core: 4 GPU tests in three files (collecting the whole core suite alone ran past 80 s on 2026-12-05),
  # one an Inductor compile with CUDA graphs
  case " $suites " in *" core "*) run_step tests_core 150 "${GPU_ONLY[@]}" tests/test_compile_backend.py tests/test_bad_input.py tests/test_timing.py ;; esac
fi
if want wave2-kernels; then  # issue 24's RoPE and activation rows, issue 28's norm rows; bf16, graph replay
  wave_install
  KG=(python3 benchmarks/kernels_gpu.py --no-do-bench --dtypes bf16)
  # WAVE2_PARTS picks the groups (default all three: rope act norms; gated-sweep only when named),
  # for a call short of device time.
  parts=" ${WAVE2_PARTS:-rope act norms} "
  [[ $parts == *" rope "* ]] && run_step kernels_rope 200 "${KG[@]}" --ops rotary_embedding rotary_pos_emb fused_qk_norm_rope --hidden 4096 \
    --budget-s "$(left_s 180)" --json "$RES/kernels_rope.json" --markdown "$RES/kernels_rope.md"; pack
  [[ $parts == *" act "* ]] && run_step kernels_act 200 "${KG[@]}" --ops gelu_and_mul gelu_tanh_and_mul mul_and_silu fatrelu_and_mul \
    swigluoai_and_mul --hidden 14336 --budget-s "$(left_s 180)" --json "$RES/kernels_act.json" --markdown "$RES/kernels_act.md"; pack
  [[ $parts == *" norms "* ]] && run_step kernels_norms 200 "${KG[@]}" --ops rms_norm_gated rms_norm_gated_grouped layer_norm layer_norm_nobias \
    --hidden 4096 8192 --budget-s "$(left_s 180)" --json "$RES/kernels_norms.json" --markdown "$RES/kernels_norms.md"; pack
  # gated-sweep (not in the default): every rms_norm_gated candidate beside Inductor at GATED_ROWS x
  # GATED_HIDDEN (default 1024 x 8192, the row the H100 run missed), first as the benchmark times them
  # (back-to-back replays on the same tensors), then cycling over 4 copies (each call past the L2).
  [[ $parts == *" gated-sweep "* ]] && run_step gated_sweep 200 sh -c "for r in 1 4; do python3 providers/triton/bench_gpu.py \
    --sweep --ops rms_norm_gated --rows ${GATED_ROWS:-1024} --hidden ${GATED_HIDDEN:-8192} --inductor --rotate \$r; done"
fi
if want quant-kernels; then  # issue 25: the fp8 quant and fused norm/act + quant kernels, bf16, graph replay
  wave_install
  # QUANT_ONLY: a subset of the ops (e.g. the two static norm forms FlashInfer has), default all twelve
  QUANT_OPS=${QUANT_ONLY:-$(python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import kernels_gpu; print(*kernels_gpu.QUANT_OPS)")}
  # QUANT_BUDGET_S: every column of every op takes more than the default 270 s (H200, 2026-12-05:
  # eager, triton, Inductor's compile of the fused natives and triton unfused took 510 s); a call of
  # its own with 540 covers eager, triton, vllm_c (measured once its build is done) and compile.
  # QUANT_AB=1: also triton's whole-row launch of the fused norm + quant ops (their chunked walk's A/B).
  # QUANT_UNFUSED=1: also each fused op as triton's two unfused kernels (issue 25's fused-vs-unfused target).
  # QUANT_PROVIDERS / QUANT_ANCHORS: subsets of the columns (e.g. "triton" and "compile flashinfer").
  qb=${QUANT_BUDGET_S:-270}
  # shellcheck disable=SC2086  # the op, hidden, provider and anchor lists split on spaces
  run_step kernels_quant $((qb + 30)) python3 benchmarks/kernels_gpu.py --no-do-bench --dtypes bf16 --ops $QUANT_OPS \
    --hidden ${QUANT_HIDDEN:-4096 14336} --budget-s "$(left_s "$qb")" ${QUANT_AB:+--whole-row-ab} ${QUANT_UNFUSED:+--unfused-ab} \
    ${QUANT_PROVIDERS:+--providers $QUANT_PROVIDERS} ${QUANT_ANCHORS:+--anchors $QUANT_ANCHORS} \
    --json "$RES/kernels_quant.json" --markdown "$RES/kernels_quant.md"; pack
fi
if want quant-profile; then  # issue 25: Nsight Compute counters where triton's norm + quant trails Inductor
  wave_install
  # the static and dynamic norm forms at 8192 x 14336 (1.10x and 1.05x of Inductor on the H100) and,
  # for contrast, the static form at 8192 x 4096 (1.00x); one profiled launch each, after tuning
  run_step ncu_quant 240 sh -c "ncu --profile-from-start off --clock-control none --cache-control all \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --csv --page details python3 benchmarks/profile_small_t.py \
    rms_norm_static_fp8_quant:bf16:8192x14336:compile,triton rms_norm_dynamic_quant_fp8:bf16:8192x14336:compile,triton \
    rms_norm_static_fp8_quant:bf16:8192x4096:compile,triton > '$RES/ncu_quant.csv'"; pack
fi
if want fp8-matmul; then  # issue 26: the fp8 matmuls against torch._scaled_mm
  wave_install
  # on 2026-12-05 (H100) 23 of the 50 rows took its 200 s (each row's captures and interleaved rounds):
  # a row past the budget is not started, and the JSON is rewritten after each row
  run_step matmul_fp8 ${MATMUL_CAP_S:-300} python3 benchmarks/matmul_fp8_gpu.py --budget-s "$(left_s "$((${MATMUL_CAP_S:-300} - 30))")" \
    ${MATMUL_M:+--m "$MATMUL_M"} --json "$RES/matmul_fp8.json" --markdown "$RES/matmul_fp8.md"; pack
fi
if want fp8-host; then  # issue 26: where an eager FP8 linear's time goes (host cost of each piece against its kernels)
  wave_install
  run_step fp8_host 330 python3 benchmarks/fp8_linear_host.py --device cuda --json "$RES/fp8_host.json"; pack
fi
if want e2e-llama; then  # issues 24, 26, 29: the Llama rows, rope-routed and fp8 variants included
  wave_install
  run_step e2e_llama 360 python3 benchmarks/e2e_transformers.py --device cuda --budget-s "$(left_s "${E2E_BUDGET_S:-300}")" \
    ${E2E_VARIANTS:+--variants "$E2E_VARIANTS"} ${E2E_BATCHES:+--batches "$E2E_BATCHES"} --json "$RES/e2e_llama.json" --markdown "$RES/e2e_llama.md"; pack
fi
if want e2e-moe; then  # issue 28: the Qwen3-MoE-shaped model
  wave_install
  run_step e2e_moe 330 python3 benchmarks/e2e_transformers.py --device cuda --model qwen3_moe \
    --budget-s "$(left_s "${E2E_BUDGET_S:-270}")" ${E2E_MOE_VARIANTS:+--variants "$E2E_MOE_VARIANTS"} ${E2E_BATCHES:+--batches "$E2E_BATCHES"} \
    --json "$RES/e2e_moe.json" --markdown "$RES/e2e_moe.md"; pack
fi
if want e2e-decoder; then  # issue 29: copies per compiled layer and the decoder rows
  wave_install
  run_step e2e_decoder 300 python3 benchmarks/e2e_decoder.py --device cuda --dynamic \
    --json "$RES/e2e_decoder.json" --markdown "$RES/e2e_decoder.md"; pack
fi
if want invariance; then  # issue 27: invariant kernels against the default ones, and the bitwise e2e
  wave_install
  # INVARIANCE_PARTS picks the parts (default all four: kernels fp8 e2e off), for a call short of device time.
  iparts=" ${INVARIANCE_PARTS:-kernels fp8 e2e off} "
  [[ $iparts == *" kernels "* ]] && run_step invariance_kernels 150 python3 benchmarks/batch_invariant_gpu.py --matmul \
    --json "$RES/invariance.json" --markdown "$RES/invariance.md"; pack
  [[ $iparts == *" fp8 "* ]] && run_step invariance_fp8_matmul 90 python3 benchmarks/batch_invariant_gpu.py --providers triton \
    --ops scaled_mm_fp8 block_scaled_mm_fp8 --hidden 4096 \
    --json "$RES/invariance_fp8.json" --markdown "$RES/invariance_fp8.md"; pack
  [[ $iparts == *" e2e "* ]] && run_step invariance_e2e 120 python3 benchmarks/e2e_batch_invariant.py --device cuda; pack
  # the contrast: without the mode the same prompt must differ somewhere (else the check above
  # proves nothing here); rc 0 when it does
  [[ $iparts == *" off "* ]] && run_step invariance_e2e_off 120 python3 benchmarks/e2e_batch_invariant.py --device cuda --off; pack
fi
note "done: status $STATUS; outputs in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $STATUS
