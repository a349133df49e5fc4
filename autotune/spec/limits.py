"""Physical bounds on sizes: a value far beyond any real cluster, model or batch is a typo.

Refusing it in one line, before any work, beats minutes of work on a request no machine could
run (a search's time grows with the batch). Each bound is one to three orders of magnitude above
the largest value ever published, so no real input meets it.
"""

from __future__ import annotations

from autotune.errors import require

__all__ = ["LIMITS", "check_limit"]

# name -> (largest value accepted, unit and why no real input exceeds it)
LIMITS: dict[str, tuple[int, str]] = {
    "gpus": (1_000_000, "GPUs: the largest clusters built hold about 2e5 (xAI Colossus, 2025)"),
    "global_batch": (100_000_000, "sequences per step: published training batches hold at most about 1e4 "
                                  "(GPT-3 1536, Brown et al. 2020; Llama 3 405B 2048 of 8192 tokens, Dubey et al. 2024)"),
    "batch": (100_000_000, "concurrent sequences: serving engines batch about 1e3 (vLLM's default max_num_seqs is 256)"),
    "seq_len": (100_000_000, "tokens per sequence: the longest context windows are about 1e7 (Llama 4 Scout, 10M)"),
    # 1e5 layers took over a minute to evaluate at pp 1e5 (issue 29); 1e4 take seconds
    "num_layers": (10_000, "layers: the deepest trained transformers have about 1e3 (DeepNet, Wang et al. 2022)"),
    # a search's floors price every partial-recomputation count (1 .. layers - 1) at every stage
    # size and in-flight depth, and its stage DP runs over starts x sizes: llama-3-8b's config at
    # 1,000 layers, measured on the 2-core CI-class machine at load 2-4 (issue 29, after the uniform
    # DP stopped building (layers + 1)^2 tables a depth): 26 s / 0.51 GB on 64 GPUs, 52-59 s / 0.49 GB
    # on 256 (160 s / 2.3 GB before), 38 s / 0.50 GB on 1,024, 31 s / 0.38 GB on 16,384; at 2,000
    # layers on 64 GPUs over 240 s and 2 GB
    "search_layers": (1_000, "layers (more take minutes and gigabytes); the deepest trained transformers have "
                             "about 1e3 (DeepNet), large language models at most about 130 (Llama 3 405B 126)"),
    "width": (10_000_000, "units of a layer's width: the widest published models have about 5e4 "
                          "(PaLM 540B d_model 18432, ffn 73728; Chowdhery et al. 2022)"),
    "vocab_size": (100_000_000, "tokens: the largest vocabularies hold about 2.6e5 (Gemma, 256k)"),
}


def check_limit(field: str, value: object, name: str) -> None:
    """``value`` (already checked to be a positive integer) is within the bound ``name``."""
    limit, why = LIMITS[name]
    if isinstance(value, int) and not isinstance(value, bool):
        require(value <= limit, field, f"{value:,} is beyond any real input: at most {limit:,} {why}")
