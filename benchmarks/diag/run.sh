#!/usr/bin/env bash
# Device diagnostics for the vllm_c CUDA library: a plain run, then a backtrace under cuda-gdb.
cd "$(dirname "$0")/../.." || exit 1
export IRCORE_CACHE_DIR=${IRCORE_CACHE_DIR:-/tmp/ircore_cache} PYTHONPATH=$PWD
timeout 240 python3 -X faulthandler benchmarks/diag/cuda_throw.py 2>&1 | tail -30
echo "rc=$?"
timeout 120 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary ircore" --args python3 benchmarks/diag/cuda_throw.py 2>&1 | grep -v "^\[New Thread\|^\[Thread" | tail -40
