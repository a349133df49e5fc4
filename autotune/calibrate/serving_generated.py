"""A fixed-length benchmark's outputs as the run generated them. `vllm bench serve --dataset-name random`
asks every request for --random-output-len tokens, but the length is only a cap unless the client passes
--ignore-eos (a store_true flag: vllm-project/vllm @def9ce85 vllm/benchmarks/serve.py; sglang.bench_serving
and benchmark_serving.py the same): a request ends at its end-of-sequence token, and the client prints the
run's total ("Total generated tokens"). Where a row's notes quote that total below prompts x the stated
length, the requests decode the run's mean instead of the stated length (an early stop's request count is
not printed, so the mean, not each request's length)."""

from __future__ import annotations

import re
from dataclasses import replace

from autotune.calibrate.serving_degrees import row_int
from autotune.cost.serving_load import Load

__all__ = ["generated_outputs"]

_GENERATED = re.compile(r"\bgenerated[: ]+(\d[\d,]*)", flags=re.IGNORECASE)


def generated_outputs(load: Load, row: dict, replicas: int) -> tuple[Load, tuple[str, ...]]:
    """``load`` with the row's notes' generated total over its fixed prompt set (``replicas`` copies of
    it), where the row states both lengths and that total is below them; else ``load`` as it is."""
    found = _GENERATED.search(row.get("notes", ""))
    stated = row_int(row, "isl") and row_int(row, "osl")
    if found is None or not stated or load.kind != "max_throughput" or load.lengths is not None:
        return load, ()
    generated, prompts = int(found.group(1).replace(",", "")), load.num_requests * replicas
    if generated >= prompts * load.output_len:
        return load, ()
    mean = max(1, round(generated / prompts))
    note = (f"{mean} output tokens a request: the run generated {generated} over {prompts} prompts, under the "
            f"stated {load.output_len} (end-of-sequence stops without --ignore-eos)")
    return replace(load, output_len=mean), (note,)
