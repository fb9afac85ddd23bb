#!/usr/bin/env bash
# One pass of the GPU-only checks, for a lent CUDA machine: at most 5 minutes (the step limits sum to 295 s).
#
#   bash bench/gpu_check.sh [OUT_DIR]          # OUT_DIR defaults to bench/results
#
# Installs nothing and never sets TRITON_INTERPRET, so the Triton kernels run compiled. Uses $PYTHON if set,
# else the first `python` / `python3` on PATH; that interpreter must already have CUDA torch and triton.
# Steps (each with its own time limit; a failing step is recorded and the next one still runs):
#   1. half precision compiled: the Triton kernels in bf16/fp16 at head dim 128 against the fp32 references
#      (tests/kernels/test_compiled_half.py) and the bf16 engine against the fp32 CPU engine
#   2. kernel tests with compiled Triton (varlen, paged varlen and decode through it, the step plan, store,
#      fmha, kv_cache, ops errors)
#   3. varlen Triton vs SDPA flash on the same packed bf16 head-dim-128 workload (bench.packing --flash)
#   4. padded vs packed attention (bench.packing)
#   5. paged decode (paged varlen, one query per sequence): overhead vs contiguous and achieved HBM bandwidth
#      (bench.paged_decode, contexts <= 2048)
#   6. paged varlen (one kernel for every step kind, planned per call and once per step) vs gather + varlen and
#      vs varlen on contiguous K/V (bench.paged_varlen, contexts up to 2048 tokens)
# Writes one JSON per step plus a summary, gpu_check-cuda.json, under OUT_DIR.
set -u
cd "$(dirname "$0")/.."
OUT_DIR=${1:-bench/results}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-$(command -v python || command -v python3)}
unset TRITON_INTERPRET
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}

if ! "$PY" -c "import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: $PY has no CUDA device, torch or triton; nothing to check" >&2
    exit 2
fi
"$PY" -c "import torch, triton; print('gpu_check:', torch.cuda.get_device_name(0), 'torch', torch.__version__, 'triton', triton.__version__)" >&2

# step NAME LIMIT_S CMD... : run with a time limit; stdout's last line (the JSON) -> OUT_DIR/NAME-cuda.json
step() {
    local name=$1 limit=$2
    shift 2
    echo "gpu_check: $name (limit ${limit}s)" >&2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT_DIR/$name-cuda.out" 2>"$OUT_DIR/$name-cuda.err"
    local rc=$?
    tail -n 1 "$OUT_DIR/$name-cuda.out" >"$OUT_DIR/$name-cuda.json"
    echo "$name $rc $((SECONDS - start))" >>"$OUT_DIR/gpu_check-steps.txt"
    echo "gpu_check: $name rc=$rc in $((SECONDS - start))s" >&2
}

rm -f "$OUT_DIR/gpu_check-steps.txt"
# Half precision first: the interpreter upcasts bf16/fp16 to fp32, so these dots only ever run here. Its compiled
# kernels land in Triton's on-disk cache, which the kernel tests (they include this file) then reuse.
HALF_TESTS=(tests/kernels/test_compiled_half.py tests/engine/test_llm.py::test_cuda_engine_matches_cpu_engine)
step half_precision 70 "$PY" -m pytest "${HALF_TESTS[@]}" -p no:cacheprovider --junitxml="$OUT_DIR/half_precision-cuda.xml"
# The kernel tests: tests/kernels, plus the xformers-style front door and the paged KV cache that call them.
# 2026-12: limits rebalanced without a GPU run to keep the sum at 295 s: the kernel tests now also compile about
# 30 variants of the paged varlen kernel (the decode-only kernel and its split-K variants are gone; decode is
# paged varlen with len_q = 1); the benchmarks after them reuse kernels from Triton's on-disk cache.
# After a run, gpu_check-steps.txt has each step's seconds: rebalance from those.
KERNEL_TESTS=(tests/kernels tests/engine/attention/test_fmha.py tests/engine/worker/test_kv_cache.py)
step kernel_tests 150 "$PY" -m pytest "${KERNEL_TESTS[@]}" -p no:cacheprovider -m "not browser" --junitxml="$OUT_DIR/kernel_tests-cuda.xml"
step varlen_vs_flash 35 "$PY" -m bench.packing --flash --json --repeats 5 --warmup 1
step packing 12 "$PY" -m bench.packing --json --repeats 5 --warmup 1
step paged_decode 14 "$PY" -m bench.paged_decode --json --repeats 5 --warmup 1 --max-len 2048
step paged_varlen 14 "$PY" -m bench.paged_varlen --json --repeats 5 --warmup 1 --max-len 2048

# Summary: each step's rc and seconds, its JSON (tests: pytest's last line), in one file.
"$PY" - "$OUT_DIR" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
summary = {}
for line in (out / "gpu_check-steps.txt").read_text().splitlines():
    name, rc, seconds = line.split()
    entry = {"rc": int(rc), "seconds": int(seconds), "timed_out": rc == "124"}
    text = (out / f"{name}-cuda.json").read_text().strip()
    try:
        entry["result"] = json.loads(text)
    except json.JSONDecodeError:
        entry["last_line"] = text  # pytest's "N passed, M failed in S s", or an error
    summary[name] = entry
(out / "gpu_check-cuda.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps({name: {k: v for k, v in e.items() if k != "result"} for name, e in summary.items()}))
EOF
