"""Llama 4 Maverick FP8 on 8 H200 as the 0.20 and 1.x overviews measured it, priced under both TensorRT-LLM presets and
both attention-DP readings: the check file's rows trt020-022 / 023 (0.20, "TP8", 128/2048 and 1024/2048) and trt1x-011
(1.x, "DEP8", 1000/1000), plus the 1.0 page's "TP8" 1000/1000 cell (31,782 tokens/s over 8 GPUs, quoted in
docs/serving.md's trtep44 paragraph; not a check row) built from trt1x-011 with ep blank and attention DP on or off.
A diagnosis aid (issue 31, trtdep45): it changes no row and no price.

    python scripts/maverick_release_reading.py
"""

from __future__ import annotations

from autotune.calibrate.serving_published import check_serving_rows
from autotune.spec.json_file import read_csv_file

ROWS = "tests/data/trtllm_pytorch_versions_check.csv"
V10_TP8_TOKENS_PER_S = 31782.0  # perf-overview.md (1.0 page), Llama 4 Maverick FP8, H200 TP8, 1000/1000
V020, V10 = "0.20.0 (PyTorch backend, trtllm-bench)", "1.0.0 (PyTorch backend, trtllm-bench)"


def _variants(rows: dict[str, dict]) -> list[dict]:
    out = [{**rows[i], "id": f"{i}@{tag}", "engine_version": v} for i in ("trt020-022", "trt020-023", "trt020-024")
           for tag, v in (("0.20", V020), ("1.0", V10))]
    base = rows["trt1x-011"]
    out.append({**base, "id": "trt1x-011 (DEP8)"})
    for tag, dp in (("no attention DP", "without attention DP"), ("attention DP", "enable_attention_dp: true")):
        out.append({**base, "id": f"1.0 TP8 1000/1000 ({tag})", "ep": "", "value": str(V10_TP8_TOKENS_PER_S / 8),
                    "notes": f"column 'H200 TP8'; trtllm-bench throughput --backend pytorch; {dp}"})
    return out


def main() -> None:
    rows = {r["id"]: r for r in read_csv_file(ROWS, "runs")[1]}
    for c in check_serving_rows(_variants(rows)):
        err = 100.0 * (c.predicted / c.measured - 1.0) if c.predicted else float("nan")
        print(f"{c.row_id:34s} measured {c.measured:10.1f}  predicted {c.predicted or 0:10.1f}  {err:+6.1f}%")


if __name__ == "__main__":
    main()
