"""MoE model specs for the tests, built directly at published dimensions."""

from autotune.spec.model import ModelSpec

# Mixtral-8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1; HF config.json of
# mistralai/Mixtral-8x7B-v0.1): 46.7B parameters, 12.9B active.
MIXTRAL_8X7B = ModelSpec(
    name="mixtral-8x7b-test", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
    ffn_hidden_size=14336, ffn_activation="swiglu", vocab_size=32000, max_seq_len=32768,
    tied_embeddings=False, norm="rmsnorm", bias=False, position_embedding="rotary", rope_theta=1e6,
    num_experts=8, num_experts_per_token=2, expert_ffn_hidden_size=14336, router="topk_softmax")


def tiny_moe(**changes) -> ModelSpec:
    """A small MoE decoder: 4 layers, first dense, then every layer MoE with a shared expert."""
    base = dict(name="tiny-moe", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
                ffn_activation="swiglu", vocab_size=256, max_seq_len=128, tied_embeddings=False, norm="rmsnorm",
                bias=False, position_embedding="rotary", num_experts=4, num_experts_per_token=2,
                expert_ffn_hidden_size=32, num_shared_experts=1, shared_expert_ffn_hidden_size=32,
                first_k_dense_layers=1)
    return ModelSpec(**{**base, **changes})
