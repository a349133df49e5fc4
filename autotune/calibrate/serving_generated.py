"""A fixed-length benchmark's outputs as the run generated them. `vllm bench serve --dataset-name random`
asks every request for --random-output-len tokens, but the length is only a cap unless the client passes
--ignore-eos (a store_true flag: vllm-project/vllm @def9ce85 vllm/benchmarks/serve.py; sglang.bench_serving
and benchmark_serving.py the same): a request ends at its end-of-sequence token, and the client prints the
run's total ("Total generated tokens"). Where a row's notes quote that total below prompts x the stated
length, the requests decode the run's mean instead of the stated length (an early stop's request count is
not printed, so the mean, not each request's length).

A dataset row whose requests' lengths are drawn (ShareGPT) and whose notes quote the client's totals ("Total
input tokens", "Total generated tokens") has its drawn lengths scaled to them: the client counts each prompt
with the model's own tokenizer and each output as generated (vllm/benchmarks/serve.py prints both sums), so
the totals carry the tokenizer, the seed's sample and any end-of-sequence stops that the dataset's table,
counted with one tokenizer over the whole dataset, does not."""

from __future__ import annotations

import re
from dataclasses import replace

from autotune.calibrate.serving_degrees import row_int
from autotune.cost.serving_lengths import RequestLengths
from autotune.cost.serving_load import Load

__all__ = ["generated_outputs"]

# "generated 195544" as the check rows' notes abbreviate it, or the client's own "Total generated tokens: 196004"
# (vllm/benchmarks/serve.py and sglang.bench_serving print that line; its "(retokenized)" twin is not read)
_GENERATED = re.compile(r"\bgenerated(?: tokens)?[: ]+(\d[\d,]*)", flags=re.IGNORECASE)
_INPUT = re.compile(r"\binput tokens[: ]+(\d[\d,]*)", flags=re.IGNORECASE)
# the same two totals as a row's notes give them after its prompt count: "500 prompts (100895 input / 100377
# output tokens)" (benchmark_serving.py prints them as "Total input tokens" and "Total generated tokens")
_PAIR = re.compile(r"\bprompts \((\d[\d,]*) input / (\d[\d,]*) output tokens\)", flags=re.IGNORECASE)


def generated_outputs(load: Load, row: dict, replicas: int) -> tuple[Load, tuple[str, ...]]:
    """``load`` with the row's notes' generated total over its fixed prompt set (``replicas`` copies of
    it), where the row states both lengths and that total is below them; else ``load`` as it is."""
    if load.lengths is not None:
        return _drawn_to_totals(load, row, replicas)
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


def _drawn_to_totals(load: Load, row: dict, replicas: int) -> tuple[Load, tuple[str, ...]]:
    """A burst's drawn lengths scaled so that the requests it draws (``load.seed``'s draw, as
    serving_load.requests_for makes it, on each of ``replicas``) sum to its notes' quoted totals (each
    total on its own; neither quoted: ``load`` as it is)."""
    notes, lengths = row.get("notes", ""), load.lengths
    pair = _PAIR.search(notes)
    found = [_INPUT.search(notes), _GENERATED.search(notes)]
    totals = [pair.group(k + 1) if pair else (m.group(1) if m else None) for k, m in enumerate(found)]
    if load.kind != "max_throughput" or not any(totals):
        return load, ()
    drawn = [replicas * int(x.sum()) for x in lengths.draw(load.num_requests, load.seed)]
    factors = [int(t.replace(",", "")) / d if t else 1.0 for t, d in zip(totals, drawn)]
    scaled = RequestLengths(name=f"{lengths.name} (scaled to the run's totals)", percents=lengths.percents,
                            input_tokens=tuple(max(1.0, q * factors[0]) for q in lengths.input_tokens),
                            output_tokens=tuple(max(1.0, q * factors[1]) for q in lengths.output_tokens),
                            source=f"{lengths.source}; scaled to the row's quoted totals")
    load = replace(load, lengths=scaled, input_len=max(1, round(scaled.mean_input_tokens)),
                   output_len=max(1, round(scaled.mean_output_tokens)))
    note = (f"drawn lengths scaled x{factors[0]:.3f} prompts, x{factors[1]:.3f} outputs: the {load.num_requests * replicas} "
            f"requests drawn sum to the run's quoted totals ({drawn[0]} / {drawn[1]} tokens before)")
    return load, (note,)
