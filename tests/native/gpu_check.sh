#!/usr/bin/env bash
# tcemu's native library on the GPU machine: build it (the GEMM kernels compiled by this machine's Triton, and the
# C++ host demo) against the CUDA torch, run the native tests (the gpu-marked CUDA bit-equality ones, among them
# the ahead-of-time kernels' against tcemu's Python Triton path, and the CPU ones), and the host demo on CUDA and
# the CPU.
#
#   bash tests/native/gpu_check.sh        (from the repository root; results under $OUT, default out/native-gpu)
#
# Every step runs even if an earlier one failed; summary.txt lists each step's exit status and seconds.
set -u
OUT=${OUT:-out/native-gpu}
PY=${PYTHON:-python}
BUILD=build/native-tests
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
summary="$OUT/summary.txt"
: > "$summary"

step() {  # step NAME LOG COMMAND...
  local name=$1 log=$2 start rc
  shift 2
  start=$(date +%s)
  "$@" > "$OUT/$log" 2>&1
  rc=$?
  printf '%-16s rc=%-3s %4d s  (%s)\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$log" >> "$summary"
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  for tool in cmake ninja c++ g++ nvcc; do printf '%s: ' "$tool"; command -v "$tool" || echo "not found"; done
} > "$OUT/env.txt" 2>&1

step build-library build_library.log $PY -m tcemu.native build --dir "$BUILD" --verbose
# what the library holds and runs on this GPU (the kernels compiled ahead of time by this machine's Triton)
step native-info native_info.log $PY -c "import sys, torch, triton; print('triton', triton.__version__); \
torch.ops.load_library(sys.argv[1]); print(torch.ops.tcemu.native_info())" "$BUILD/libtcemu_native.so"
step build-host build_host.log $PY -m tcemu.native build --dir "$BUILD" --host --verbose
step tests-gpu pytest_gpu.log $PY -m pytest -q -p no:cacheprovider -n 0 -rA -m gpu tests/native
step tests-cpu pytest_cpu.log $PY -m pytest -q -p no:cacheprovider -n 0 -rA -m "not gpu" tests/native
step host-demo-cuda host_demo_cuda.log $PY tests/native/host_demo.py --build "$BUILD" --device cuda --out "$OUT"
step host-demo-cpu host_demo_cpu.log $PY tests/native/host_demo.py --build "$BUILD" --device cpu --out "$OUT"
rm -f "$OUT"/*.pt
cat "$summary"
