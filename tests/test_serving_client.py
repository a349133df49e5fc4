"""The benchmark client's own loop (tests/data/serving_client_bench.toml): why it is not priced.

A token's stamp on `vllm bench serve`'s or sglang.bench_serving's clock waits for the client's one asyncio
loop only where the client reads chunks slower than they come. These tests hold the measured figures
against what the check rows stream and against vLLM's API server, which writes each chunk before the client
reads it; a new row or measurement that breaks them means the client must be priced (docs/serving.md).
"""

from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path

from autotune.spec.runtime import load_runtime

DATA = Path(__file__).parent / "data"
BENCH = tomllib.loads((DATA / "serving_client_bench.toml").read_text())
CLIENTS = ("vllm bench serve", "benchmark_serving", "bench_serving")
CHECK_FILES = ("vllm_newer_check.csv", "serving_runs.csv", "sglang_newer_check.csv", "inferencex_b300_check.csv")
SECTIONS = ("vllm_0_33_completions", "vllm_0_11_chat", "sglang_0_5_3_generate")


def _one_read_s() -> float:
    """The dearest chunk measured where the client kept up (one read a chunk: no coalescing to help it)."""
    return max(v for s in SECTIONS for v in BENCH[s]["one_read_cpu_a_chunk_s"]["value"])


def _python_client_chunk_rates() -> dict[str, float]:
    """Chunks a second of every output-throughput row measured by a Python asyncio benchmark client: the
    row's output tokens a second (all its GPUs) over its --stream-interval (tokens a chunk; 1 when unstated)."""
    rates = {}
    for name in CHECK_FILES:
        for row in csv.DictReader((DATA / name).open()):
            text, metric = (row["source"] + " " + row["notes"]).lower(), row["metric"].lower()
            if row["engine"].lower() not in ("vllm", "sglang") or not any(c in text for c in CLIENTS):
                continue
            if "output" not in metric or not ("throughput" in metric or "tok" in metric):
                continue
            tokens_s = float(row["value"]) * (int(row["gpus"]) if "per gpu" in row["unit"].lower() else 1)
            interval = re.search(r"--stream-interval[ =](\d+)", row["notes"])
            rates[row["id"]] = tokens_s / (int(interval.group(1)) if interval else 1)
    return rates


def test_the_measurement_separates_coalesced_reads_from_one_read_a_chunk():
    # a lagging client reads several chunks at once and pays less a chunk: the one-read figure is the dearer
    for s in SECTIONS:
        assert max(BENCH[s]["coalesced_cpu_a_chunk_s"]["value"]) < min(BENCH[s]["one_read_cpu_a_chunk_s"]["value"])


def test_the_client_keeps_up_with_every_python_client_row():
    rates = _python_client_chunk_rates()
    assert {"vn-go-07", "vn-b2-01", "sglnew-031"} <= rates.keys()  # the bursts and the busiest SGLang row
    busy = {rid: rate * _one_read_s() for rid, rate in rates.items()}
    assert max(busy.values()) < 0.5, max(busy.items(), key=lambda kv: kv[1])


def test_the_client_reads_a_chunk_faster_than_vllms_api_server_writes_one():
    # tandem queues: behind a slower server the client's queue stays empty, its stamps lag by one read
    server_s = load_runtime("vllm-0.8").serving.frontend_s_per_seq
    measured = tomllib.loads((DATA / "vllm_0_11_frontend_bench.toml").read_text())["streaming"]["least_cpu_s"]
    server_1000_streams_s = min(run[-1] for run in measured["value"])
    assert _one_read_s() < min(server_s, server_1000_streams_s)
