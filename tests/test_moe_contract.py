"""The cost-model contract suite (tests/test_cost_contract.py) run again on a mixture-of-experts
model: its training, prefill, decode and serving stages keep the same behaviour."""

import pytest

import test_cost_contract as contract
from moe_models import tiny_moe
# the suite's tests and fixture, collected again in this module with the MoE model
from test_cost_contract import (kind, test_an_array_of_layer_counts_prices_each_count_as_one_call_would,  # noqa: F401
                                test_an_array_of_micro_batches_broadcasts_like_single_sizes,
                                test_every_phase_is_a_stage_cost_model_with_a_positive_weight,
                                test_more_layers_cost_more_time_memory_and_parameters,
                                test_more_micro_batches_in_flight_hold_more_memory,
                                test_tensor_parallelism_splits_parameters_and_compute,
                                test_stage_memory_is_the_stage_costs_memory, test_time_and_memory_are_positive_and_finite)

# every layer MoE (the search's per-count share is then exact), with a shared expert
MOE = tiny_moe(first_k_dense_layers=0, max_seq_len=1024, hidden_size=128, ffn_hidden_size=256)


@pytest.fixture(autouse=True)
def moe_model(monkeypatch):
    monkeypatch.setattr(contract, "MODEL", MOE)


def test_the_suite_prices_the_moe_model(kind):  # noqa: F811 (the imported fixture)
    for _, model in contract._models(kind):
        assert model.context.tables.moe_layer is not None
        assert model.stage_cost(contract._stage(), contract.MIDDLE).time.ep_comm_s >= 0
