#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The checks of the NCCL/CUDA backend that need a GPU, as one script for a
# machine that has one: the GPU module's own tests (exports, architectures,
# loading under mpirun), the NCCL case of the exec tests, calibrate on the
# GPUs (--backend nccl), and the bundled
# graphs run forward and as training steps with --check on the nccl backend
# beside the mpi backend, each with its measured and predicted times. CI has
# no GPU, so these runs are recorded in docs/exec.md ("On a GPU").
#
# Usage: tools/exec/gpu_check.sh RECSEARCH_BINARY GPU_MODULE OUT_DIR
# GPU_CHECK_BACKENDS (default "nccl mpi") names the backends of the graph runs.
# Needs mpirun on PATH and libcudart, libcublas and libnccl where the loader
# finds them. Exit status: the number of failed steps.
set -u
BIN=$1
MODULE=$2
OUT=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
export RECSEARCH_GPU_MODULE=$MODULE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$OUT/work"
failed=0

step() {
  local name=$1
  shift
  echo "=== $name: $*"
  local start=$SECONDS
  "$@"
  local rc=$?
  echo "=== $name: rc $rc, $((SECONDS - start)) s"
  # 77 is a skip in the test scripts' convention.
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then failed=$((failed + 1)); fi
}

step gpu nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
step module_deps ldd "$MODULE"
for c in module archs load; do
  step "gpu_module_$c" timeout 300 "$PY" "$ROOT/tests/exec/gpu_module_test.py" "$BIN" "$BIN" "$MODULE" "$c"
done
step exec_mpi_nccl timeout 300 "$PY" "$ROOT/tests/exec/exec_test.py" "$BIN" "$ROOT" nccl

# calibrate on the GPU: one rank measures the device alone (cuBLAS GEMMs in
# f32, TF32 and bf16, the copy); with several GPUs, every GPU of the node
# and the collectives too, written as a cluster file.
step calibrate_gpu_1 timeout 300 mpirun -np 1 "$BIN" calibrate --backend nccl --np 1 \
  --samples "$OUT/calibrate_gpu_1.json"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then
  step "calibrate_gpu_$gpus" timeout 600 mpirun -np "$gpus" "$BIN" calibrate --backend nccl \
    --np "$gpus" -o "$OUT/calibrated_$gpus.json" --samples "$OUT/calibrate_gpu_$gpus.json"
fi

# The bundled graphs and a one-layer GPT whose GEMMs dominate, on one rank:
# forward and training, nccl beside mpi.
step gen_gpt "$BIN" gen gpt --layers 1 --hidden 512 --heads 8 --seq 256 --vocab 4096 --batch 4 \
  -o "$OUT/work/gpt_1x512.json"
# Ten Adam steps where the CPU reference runs in seconds: elements whose
# gradient is float noise drift apart under Adam (docs/exec.md, --check).
for g in chain gpt2_block_small bert_large_small attention_mix ffn gpt_1x512; do
  graph=$ROOT/tests/exec/graphs/$g.json
  [ -f "$graph" ] || graph=$ROOT/data/graphs/$g.json
  [ -f "$graph" ] || graph=$OUT/work/$g.json
  steps=10
  [ "$g" = gpt_1x512 ] && steps=3
  plan=$OUT/work/$g.plan.json
  step "search_$g" "$BIN" search "$graph" --devices 1 -q -o "$plan"
  for backend in ${GPU_CHECK_BACKENDS:-nccl mpi}; do
    step "forward_${g}_$backend" timeout 300 mpirun -np 1 "$BIN" exec "$graph" "$plan" \
      --backend $backend --check --steps 3 --timeout 120
    step "train_${g}_$backend" timeout 300 mpirun -np 1 "$BIN" exec "$graph" "$plan" \
      --backend $backend --train --optimizer adam --check --steps $steps --timeout 120
  done
done
echo "gpu_check: $failed failed step(s)"
exit $failed
