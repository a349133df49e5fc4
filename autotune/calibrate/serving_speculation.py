"""A published row's speculative decoding, read from the engine options its notes quote.

TensorRT-LLM's LLM-API YAML (``speculative_config: decoding_type: MTP, num_nextn_predict_layers: 3``,
as trtllm-bench --extra_llm_api_options and trtllm-serve take it) or its example's flags
(``--spec_decode_algo MTP --spec_decode_nextn 3``, examples/llm-api/quickstart_advanced.py) give the
draft count k. The acceptance comes from the notes: 'acceptance length 2.82' (tokens a step, as
TensorRT-LLM's tech blog 1 tabulates its 'Acceptance Rate': 1.00 without MTP) or a per-draft probability
('acceptance rate 0.85', '85%'), or trtllm-serve's per-request avg_decoded_tokens_per_iter; a row stating
none is priced at the acceptance TensorRT-LLM measured for DeepSeek-R1's MTP at that k
(serving_speculative.MTP_ACCEPTANCE_LENGTH), listed under ``assumed``. Other draft methods (Eagle,
n-gram, a draft model) are not modelled: such a row is priced as plain decoding and says so.
"""

from __future__ import annotations

import re

from autotune.cost.serving_speculative import Speculation, default_acceptance_length, geometric_acceptance_length

__all__ = ["speculation_from_notes"]

_MTP = (r"decoding_type\W{0,4}mtp\b.{0,80}?num_nextn_predict_layers\W{0,4}(\d+)"
        r"|num_nextn_predict_layers\W{0,4}(\d+).{0,80}?decoding_type\W{0,4}mtp\b"
        r"|--spec_decode_algo[ =]mtp\b.{0,40}?--spec_decode_nextn[ =](\d+)")
_OTHER = r"decoding_type\W{0,4}(eagle3?|ngram|draft_target|medusa|lookahead)\b|--spec_decode_algo[ =](eagle3?|ngram)\b"
# 'acceptance length 2.82', 'acceptance rate 85%', trtllm-serve's per-request 'avg_decoded_tokens_per_iter: 2.6'
_ACCEPTANCE = r"(acceptance length|acceptance rate|avg_decoded_tokens_per_iter)\W{0,4}(\d+(?:\.\d+)?)\s*(%?)"


def speculation_from_notes(notes: str) -> tuple[Speculation | None, tuple[str, ...]]:
    """(the row's MTP speculation or None, what was assumed)."""
    mtp = re.search(_MTP, notes, flags=re.IGNORECASE | re.DOTALL)
    if not mtp:
        other = re.search(_OTHER, notes, flags=re.IGNORECASE)
        if other:
            method = other.group(1) or other.group(2)
            return None, (f"speculative decoding ({method}) is not modelled: priced as plain decoding",)
        return None, ()
    k = int(next(g for g in mtp.groups() if g))
    stated = re.search(_ACCEPTANCE, notes, flags=re.IGNORECASE)
    if stated is None:
        length = default_acceptance_length(k)
        return (Speculation(method="mtp", draft_tokens=k, acceptance_length=length),
                (f"MTP {k} drafts at acceptance length {length:g}: the row states none (the run's mean tokens a step, "
                 "trtllm-serve's avg_decoded_tokens_per_iter, would set it); DeepSeek-R1's measured on B200, "
                 "TensorRT-LLM tech blog 1 (serving_speculative.MTP_ACCEPTANCE_LENGTH)",))
    kind, value, percent = stated.group(1).lower(), float(stated.group(2)), stated.group(3)
    if percent or value < 1.0:  # a per-draft probability
        probability = value / 100.0 if percent else value
        length = geometric_acceptance_length(k, probability)
        return (Speculation(method="mtp", draft_tokens=k, acceptance_length=length),
                (f"MTP {k} drafts: acceptance {kind} {value:g}{percent} read as a per-draft probability, "
                 f"acceptance length {length:.2f} (Leviathan et al. 2023 eq. 1)",))
    return Speculation(method="mtp", draft_tokens=k, acceptance_length=value), (
        f"MTP {k} drafts at the stated acceptance length {value:g} (tokens a decode step)",)
