"""Count the kernels one `generate` decode step of transformers issues: per decoder layer and per step.

In eager PyTorch the host issues every kernel of a decode step from Python; a decode step of a
small batch runs its kernels in a few milliseconds, so the host's issue time, not the GPU, sets
the time per output token (measured: tests/data/h200/infer-2026-11-27, 16-83 ms a step on an H200
whose kernels ran 2-17 ms). cost/host.py prices a kernel-launching operator; this counts them as
transformers' own code issues them: the model built from its config class (bf16 weights, SDPA),
`generate` run greedily on this machine's CPU with tiny sizes under a TorchDispatchMode that counts
every ATen operator that launches a kernel (profilers/opstream.py's list of those that do not). The
counts depend on the code path, not on the sizes or the device. One decode step = generate(3) less
generate(2): the model's forward with the DynamicCache append, and generate's own per-step work
(logits processors, stopping criteria, the next input). Built with 1 and 2 layers, the difference
is one layer's kernels; the rest, the embedding, final norm, LM head and generate's loop.

Run: ``python -m profilers.decode_ops [--out FILE]`` (needs transformers) writes
``autotune/data/decode_launches.json``, keyed by the operator-stream names (profilers/opstreams.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from profilers.opstream import _NOTHING

__all__ = ["FAMILIES", "step_kernels", "decode_launches", "write"]

OUT = Path(__file__).resolve().parent.parent / "autotune" / "data" / "decode_launches.json"
# stream name -> (config class, causal-LM class, tied embeddings), as profilers/opstreams.py names them
FAMILIES = {"transformers-llama": ("LlamaConfig", "LlamaForCausalLM", True),
            "transformers-llama-untied": ("LlamaConfig", "LlamaForCausalLM", False),
            "transformers-qwen3": ("Qwen3Config", "Qwen3ForCausalLM", False),
            "transformers-qwen3-tied": ("Qwen3Config", "Qwen3ForCausalLM", True),
            "transformers-gemma2": ("Gemma2Config", "Gemma2ForCausalLM", True)}


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if f"aten.{func.__name__.split('.')[0]}" not in _NOTHING:
            self.kernels += 1
        return func(*args, **(kwargs or {}))


def _model(name: str, layers: int):
    import transformers
    config_name, model_name, tied = FAMILIES[name]
    cfg = getattr(transformers, config_name)(hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                                             max_position_embeddings=256, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval()


def _generate_kernels(model, tokens: int) -> int:
    x = torch.randint(0, 256, (2, 8))
    with torch.inference_mode(), _Count() as count:
        model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=tokens, min_new_tokens=tokens,
                       do_sample=False, pad_token_id=0)
    return count.kernels


def step_kernels(name: str, layers: int) -> int:
    """Kernels of one decode step of a ``layers``-layer model: generate(3) less generate(2)."""
    model = _model(name, layers)
    _generate_kernels(model, 2)  # first call: lazy initialisation out of the counts
    return _generate_kernels(model, 3) - _generate_kernels(model, 2)


def decode_launches(name: str) -> dict[str, int]:
    one, two = step_kernels(name, 1), step_kernels(name, 2)
    return {"per_layer": two - one, "per_step": one - (two - one)}


def write(out: Path = OUT) -> Path:
    import transformers
    data = {"schema": "autotune.decode_launches/1",
            "source": "profilers/decode_ops.py: kernel-launching ATen operators of one transformers generate decode "
                      "step (greedy, DynamicCache, SDPA, bf16), counted on CPU",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
            "date": datetime.date.today().isoformat(),
            "streams": {name: decode_launches(name) for name in FAMILIES}}
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    print(write(ap.parse_args().out).read_text())


if __name__ == "__main__":
    main()
