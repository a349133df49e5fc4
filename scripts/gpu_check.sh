#!/usr/bin/env bash
# One prepared check on a machine with one NVIDIA GPU (issue 27), in under 8 minutes:
#   1. profile the GPU: quick sweep, no collectives                                   (~1 min)
#   2. validate four plans of the reference model in bf16 (tests/data/h200/plans a, c, d and the
#      MoE plan e), each under its own time limit                                     (<= 4 min)
#   3. train five dense transformers models as people do (scripts/hf_bench.py), then
#      OLMoE-1B-7B (grouped_mm experts; last, so a time-out cuts only it)             (<= 3 min)
#   4. trace one warm step of plan a and of Llama-3.2-1B kernel by kernel (scripts/gpu_trace.py) (<= 1 min)
#   5. write one JSON report: GPU, software versions, date, every run measured beside autotune's
#      prediction with the datasheet cluster and with the profile just measured (scripts/gpu_check_report.py)
# A part that fails or runs out of time leaves its runs out (or marked failed); the report is
# written whatever happened. Usage: scripts/gpu_check.sh [OUT.json] (default: gpu_check.json)
# A shorter check on the same GPU kind (what a later lent GPU re-measures) sets, in the environment:
#   GPU_CHECK_PROFILE=FILE    price with this measured profile of the same GPU instead of profiling again
#   GPU_CHECK_PLANS="e"       the plan letters to validate (default: "a c d e")
#   GPU_CHECK_CASES=FILE      scripts/hf_bench.py's cases (default: scripts/gpu_check_cases.json)
#   GPU_CHECK_TRACE_PLANS, GPU_CHECK_TRACE_HF  what gpu_trace.py traces (default: plan a, Llama-3.2-1B 4 x 2048)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu_check.json}
PY=${PYTHON:-python}
WORK=${GPU_CHECK_WORK:-$(mktemp -d)}  # GPU_CHECK_WORK: keep the logs and raw reports where the caller can fetch them
mkdir -p "$WORK"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PY - > "$WORK/environment.json" <<'PYEOF'
import datetime, json, platform, subprocess
import torch
env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
       "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
       "gpu_memory_bytes": torch.cuda.mem_get_info()[1] if torch.cuda.is_available() else None}
for cmd, key in ((["nvidia-smi", "--query-gpu=driver_version,power.limit", "--format=csv,noheader"], "nvidia_smi"),
                 (["git", "rev-parse", "HEAD"], "autotune_commit")):
    try:
        env[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError:
        env[key] = None
try:
    import transformers
    env["transformers"] = transformers.__version__
except ImportError:
    env["transformers"] = None
print(json.dumps(env))
PYEOF
GPU=$($PY -c "import json,sys; print(json.load(open('$WORK/environment.json'))['gpu'] or '')")
case "$GPU" in
  *H200*) CLUSTER=dgx-h200 ;;
  *H100*) CLUSTER=dgx-h100 ;;
  *A100*) CLUSTER=dgx-a100-80gb ;;
  *B200*) CLUSTER=dgx-b200 ;;
  *) echo "gpu_check: no cluster preset for GPU '$GPU'; predicting with dgx-h100" >&2; CLUSTER=dgx-h100 ;;
esac
echo "gpu_check: $GPU -> cluster $CLUSTER; work in $WORK" >&2

PROFILE=${GPU_CHECK_PROFILE:-$WORK/profile.json}
[ -n "${GPU_CHECK_PROFILE:-}" ] || timeout 90 $PY -m autotune profile --device cuda --quick --no-collectives --out "$WORK/profile.json" \
    > "$WORK/profile.log" 2>&1 || echo "gpu_check: profile failed or ran out of time (see $WORK/profile.log)" >&2

VALIDATE=()
for letter in ${GPU_CHECK_PLANS:-a c d e}; do
  plan=$(ls tests/data/h200/plans/"$letter"-*.json | head -1)
  name=$(basename "$plan" .json)
  timeout 75 $PY -m autotune validate "$plan" --device cuda --cluster "$CLUSTER" --steps 3 --timeout 70 \
      --json --out "$WORK/validate-$name.json" > "$WORK/validate-$name.log" 2>&1 \
      || echo "gpu_check: validate $name did not finish cleanly (see $WORK/validate-$name.log)" >&2
  VALIDATE+=("$WORK/validate-$name.json")
done

timeout 180 $PY scripts/hf_bench.py "${GPU_CHECK_CASES:-scripts/gpu_check_cases.json}" "$WORK/hf.jsonl" --device cuda \
    > "$WORK/hf.log" 2>&1 || echo "gpu_check: hf_bench did not finish cleanly (see $WORK/hf.log)" >&2

# every kernel of one warm step of plan a and of Llama-3.2-1B, by name (what the cost model's classes
# are checked against: docs/h200-measured.md, "A lent H200, traced kernel by kernel")
timeout 60 $PY scripts/gpu_trace.py "$WORK/trace.json" --plan ${GPU_CHECK_TRACE_PLANS:-tests/data/h200/plans/a-*.json} \
    --hf ${GPU_CHECK_TRACE_HF:-tests/data/h200/hf/llama-3.2-1b.json:4:2048} > "$WORK/trace.log" 2>&1 \
    || echo "gpu_check: gpu_trace did not finish cleanly (see $WORK/trace.log)" >&2

$PY scripts/gpu_check_report.py --cluster "$CLUSTER" --validate "${VALIDATE[@]}" --hf "$WORK/hf.jsonl" \
    --cases "${GPU_CHECK_CASES:-scripts/gpu_check_cases.json}" --profile "$PROFILE" --environment "$WORK/environment.json" --trace "$WORK/trace.json" --out "$OUT"
echo "gpu_check: wrote $OUT (logs in $WORK)" >&2
