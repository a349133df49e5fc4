"""Other vLLM 0.11.0 chat bursts of the same lab, priced as the check rows are: does the template parse carry?

The gpustack performance-lab pages other than the check rows' run the same `vllm bench serve --backend openai-chat
--endpoint /v1/chat/completions` ShareGPT burst (1000 prompts at once) on vLLM 0.11.0 with other checkpoints, so
other templates: GLM-4.6 (8 H200), GLM-4.5-Air (4 H100), Qwen3-14B and Qwen3-32B (1 H100), and gpt-oss-20b (1 H100,
whose chat goes through harmony: no template, the control). None is a check row and nothing is fitted to them;
each is priced as a row of tests/data/vllm_newer_check.csv would be (vn-qw-01's cells with the page's deployment)
and the published TTFT (mean / median / P99, s) and output tokens/s are printed beside the model's.

  python scripts/diag_vllm_chat_template_runs.py [--without-parse] [RUN ...]

``--without-parse`` prices them without the per-request template parse (autotune/calibrate/chat_template_intake.py).
Published figures: gpustack/gpustack @47277d79 docs/performance-lab/PAGE.md, section '1. Choosing the Inference
Engine', the vLLM baseline's 'Benchmark result' block.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import autotune.calibrate.serving_rows as serving_rows  # noqa: E402
from diag_vllm_burst import check_rows, model_stats  # noqa: E402

SHAREGPT = "ShareGPT_V3_unfiltered_cleaned_split, --num-prompts 1000"
# run: (page, the row's cells, published TTFT mean / median / P99 ms, duration s, generated tokens)
RUNS = {
    "glm46_h200_tp8": ("glm-4.x/h200",
        dict(model="GLM-4.6", hf_model_id="zai-org/GLM-4.6", params_b="355", gpu="H200-SXM-141GB", gpus="8", tp="8", precision="bf16",
             notes=f"vllm serve zai-org/GLM-4.6 -tp 8; {SHAREGPT}"),
        [15339.53, 15377.50, 21078.26], 68.67, 199702),
    "glm45air_h100_tp4": ("glm-4.5-air/h100",
        dict(model="GLM-4.5-Air", hf_model_id="zai-org/GLM-4.5-Air", params_b="106", gpu="H100-80GB", gpus="4", tp="4", precision="bf16",
             notes=f"vllm serve zai-org/GLM-4.5-Air -tp 4; {SHAREGPT}"),
        [16383.88, 16164.27, 19975.18], 52.39, 199895),
    "qwen3_14b_h100_tp1": ("qwen3-14b/h100",
        dict(model="Qwen3-14B", hf_model_id="Qwen/Qwen3-14B", arch="dense", params_b="14.8", gpu="H100-80GB", gpus="1", tp="1", precision="bf16",
             notes=f"vllm serve Qwen/Qwen3-14B; {SHAREGPT}"),
        [22141.21, 21872.31, 31156.86], 63.53, 201648),
    "qwen3_32b_h100_tp1": ("qwen3-32b/h100",
        dict(model="Qwen3-32B", hf_model_id="Qwen/Qwen3-32B", arch="dense", params_b="32.8", gpu="H100-80GB", gpus="1", tp="1", precision="bf16",
             notes=f"vllm serve Qwen/Qwen3-32B; {SHAREGPT}"),
        [78118.74, 77291.46, 153161.51], 178.01, 201422),
    "gptoss20b_h100_tp1": ("gpt-oss-20b/h100",
        dict(model="gpt-oss-20b", hf_model_id="openai/gpt-oss-20b", params_b="21", gpu="H100-80GB", gpus="1", tp="1", precision="mxfp4",
             notes=f"vllm serve openai/gpt-oss-20b; {SHAREGPT}"),
        [4881.62, 4791.97, 8166.01], 24.81, 193979),
}


def report(names: list[str]) -> None:
    base = check_rows()["vn-qw-01"]
    for name in names or list(RUNS):
        page, cells, ttft_ms, duration_s, generated = RUNS[name]
        row = dict(base, id=name, ep="", concurrency_or_batch="request rate inf, 1000 prompts",
                   source=f"gpustack/gpustack docs/performance-lab/{page}.md @47277d79 [vllm bench serve --backend openai-chat]",
                   **cells)
        m = model_stats(row)
        pub_tok_s, mod_tok_s = generated / duration_s, m["output_tok_s"]
        print(f"{name} ({page}): TTFT published {'/'.join(f'{x / 1e3:.2f}' for x in ttft_ms)} s, model "
              f"{'/'.join(f'{x / 1e3:.2f}' for x in m['ttft_ms'])} s ({(m['ttft_ms'][0] / ttft_ms[0] - 1) * 100:+.0f}% "
              f"at the mean); output tok/s published {pub_tok_s:.0f}, model {mod_tok_s:.0f} "
              f"({(mod_tok_s / pub_tok_s - 1) * 100:+.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help=f"some of {', '.join(RUNS)} (default: all)")
    parser.add_argument("--without-parse", action="store_true", help="price without the per-request template parse")
    args = parser.parse_args()
    if args.without_parse:
        serving_rows.with_template_parse = lambda runtime, row: (runtime, ())
    report(args.runs)


if __name__ == "__main__":
    main()
