"""Costs kept across calls (evaluate's dense stages, an MoE layer's experts, the FP8 workload,
preset specs, spec fingerprints) give what pricing afresh gives, and never what other inputs give."""

import importlib.metadata
from itertools import product as itertools_product

from autotune.cost import evaluate as evaluate_module
from autotune.cost import moe_stage
from autotune.search.cache import fingerprint
from autotune.search.evaluate import evaluate
from autotune.search.study_file import _optuna_version
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload
from tests.moe_models import tiny_moe


def _fresh(price):
    """``price()`` with nothing kept from before."""
    evaluate_module._STAGE_COSTS.clear()
    moe_stage._EXPERT_COSTS.clear()
    return price()


def _same(a, b) -> None:
    assert (a.step_time_s, a.peak_memory_bytes_per_gpu, a.fits) == (b.step_time_s, b.peak_memory_bytes_per_gpu, b.fits)
    assert [s.peak_memory_bytes for s in a.stages] == [s.peak_memory_bytes for s in b.stages]
    assert a.breakdown == b.breakdown


def test_kept_dense_stage_costs_price_fp8_and_partial_recomputation_as_afresh():
    def price(recompute_layers):
        return evaluate("large", 32, pp=8, tp=2, micro_batch=1, global_batch=64, recompute="full", fp8=True,
                        recompute_layers=recompute_layers, cluster="dgx-h100")

    fresh = _fresh(lambda: price(1))
    _same(price(1), fresh)  # the stages' costs now kept
    other = price(2)  # another count of recomputed layers is priced, not taken from the first
    assert other.step_time_s != fresh.step_time_s
    _same(other, _fresh(lambda: price(2)))


def test_kept_expert_costs_price_moe_stages_as_afresh():
    workload = TrainingWorkload(global_batch=16, seq_len=128)

    def price(ep, pp):
        return evaluate(tiny_moe(), 16, pp=pp, ep=ep, micro_batch=1, workload=workload, cluster="dgx-h100")

    fresh = {(ep, pp): _fresh(lambda ep=ep, pp=pp: price(ep, pp)) for ep in (1, 2, 4) for pp in (1, 2)}
    for (ep, pp), estimate in fresh.items():  # every layout priced again with all the others' costs kept
        _same(price(ep, pp), estimate)
    assert len({e.step_time_s for e in fresh.values()}) > 1


def test_presets_are_one_object_and_fingerprints_follow_contents():
    assert load_preset("large") is load_preset("large")
    assert load_cluster("dgx-h100") is load_cluster("dgx-h100")
    model = load_preset("large")
    kept = fingerprint(model)
    assert fingerprint(model) == kept
    assert fingerprint(model.__class__(**{**vars(model), "num_layers": model.num_layers + 1})) != kept


def test_optuna_version_read_from_its_file_is_the_installed_one():
    assert _optuna_version() == importlib.metadata.version("optuna")


def test_kept_moe_stage_costs_follow_each_stages_dense_and_moe_layers():
    """Equal MoE stages share a kept cost only where they hold as many dense and MoE layers: with
    every other layer MoE, stages of three layers starting at odd and even layers differ."""
    from autotune.cost.contract import stage_cost
    from autotune.cost.evaluate import evaluate_plan
    from autotune.plan.builders import uniform_plan
    from autotune.spec.runtime import load_runtime

    model = tiny_moe(num_layers=12, first_k_dense_layers=0, moe_layer_frequency=2)
    workload, cluster = TrainingWorkload(global_batch=16, seq_len=128), load_cluster("dgx-h100")
    runtime = load_runtime("megatron")
    plan = uniform_plan(num_layers=12, gpus=32, global_batch=16, pp=4, ep=2, micro_batch=1, recompute="full",
                        has_embeddings=True)
    kept = _fresh(lambda: evaluate_plan(model, workload, cluster, plan, runtime=runtime))
    _same(evaluate_plan(model, workload, cluster, plan, runtime=runtime), kept)  # now from the kept costs
    real = evaluate_module._stage_costs
    try:  # each stage priced on its own
        evaluate_module._stage_costs = lambda ctx, stages, positions, g: [stage_cost(ctx, s, p)
                                                                          for s, p in zip(stages, positions)]
        plain = evaluate_module.evaluate_plan(model, workload, cluster, plan, runtime=runtime)
    finally:
        evaluate_module._stage_costs = real
    assert kept == plain
    middle = [s.microbatch_time_s for s in kept.stages[1:3]]  # layers 3-5 (one MoE) and 6-8 (two MoE)
    assert middle[0] != middle[1]


def _fields_equal(a, b) -> bool:
    """Every field of two (nested) cost dataclasses holds the same numbers."""
    import dataclasses

    import numpy as np

    if dataclasses.is_dataclass(a):
        return all(_fields_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_kept_dense_terms_price_every_degree_zero_stage_and_workload_as_afresh():
    """A dense stage's data-parallel-free terms are kept across calls (cost/dense_stage.py): a
    stage priced at another degree, ZeRO stage, micro-batch count or by another workload object
    with the same contents gives what pricing it with nothing kept gives, and the kept terms are
    reused (fewer kept than priced). FP8 with reused weight casts reads the micro-batch count in
    its kernels, so the count must tell kept terms apart there."""
    import numpy as np

    from autotune.cost import dense_stage
    from autotune.cost.contract import phase_cost_models
    from autotune.cost.stage import StagePosition
    from autotune.graph.table import model_tables
    from autotune.plan.plan import StagePlan
    from autotune.spec.runtime import load_runtime

    model, cluster, runtime = load_preset("large"), load_cluster("dgx-h100"), load_runtime("megatron")
    pos = StagePosition(inflight=np.array([0.0, 1.0]).reshape(2, 1, 1), neighbors=1, p2p_inter_node=True)
    n = np.arange(1, 9)[None, :]
    cases = []
    for dtype in ("bf16", "fp8"):
        for dp, zero, recompute, count in itertools_product((1, 2, 4, 8), (0, 1, 2, 3), ("none", "full"), (8, 2)):
            workload = TrainingWorkload(global_batch=64, seq_len=1024, dtype=dtype)  # a new object each time
            tables = model_tables(model, workload.seq_len, workload.activation_bytes, workload.attention_impl)
            (_, priced), = phase_cost_models(tables, workload, cluster, runtime=runtime, micro_batch=np.array([[1], [2]]),
                                             num_microbatches=np.array([[count], [count // 2]]))
            stage = StagePlan(layers=(0, 8), has_embedding=True, has_head=False, num_gpus=2 * dp, tp=2, cp=1, dp=dp,
                              sequence_parallel=True, zero=zero, recompute=recompute)
            cases.append((priced, stage))
    dense_stage._KEPT.clear()
    kept = [priced.stage_cost(stage, pos, num_layers=n) for priced, stage in cases]
    assert 0 < len(dense_stage._KEPT) < len(cases) // 4
    fresh = []
    for priced, stage in cases:
        dense_stage._KEPT.clear()
        fresh.append(priced.stage_cost(stage, pos, num_layers=n))
    assert all(_fields_equal(a, b) for a, b in zip(kept, fresh))
    fp8 = [c for (priced, _), c in zip(cases, fresh) if priced.context.workload.dtype == "fp8"]
    assert not np.array_equal(fp8[0].fwd_s, fp8[1].fwd_s)  # 8 and 2 micro-batches reuse their casts differently


def test_fingerprints_are_the_digest_of_the_canonical_json_whatever_was_kept():
    """Frozen specs' JSON text is kept by identity (search/cache.py): a problem made of them, asked
    twice or beside other parts, digests to the SHA-256 of the plain canonical JSON."""
    import hashlib
    import json

    from autotune.search import cache
    from autotune.search.driver import SearchProblem
    from autotune.search.space import load_space
    from autotune.spec.runtime import load_runtime

    def plain(*parts):
        text = json.dumps([cache._canonical(p) for p in parts], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    model, cluster = load_preset("large"), load_cluster("dgx-h100")
    for gpus in (16, 16, 64):
        problem = SearchProblem(model=model, workload=TrainingWorkload(global_batch=64, seq_len=1024),
                                runtime=load_runtime("megatron"), cluster=cluster, gpus=gpus, space=load_space("rich"))
        for parts in ((problem, True), (model, problem.workload, {"b": [1.5, float("inf")], "a": None}), (problem,)):
            assert cache.fingerprint(*parts) == plain(*parts)


def test_checked_stage_fields_tell_types_apart():
    """A stage whose fields but its place passed the checks skips them elsewhere only when every
    other field has the same value and type (fp8=1, == True, is still refused), and its layers are
    checked each time."""
    import pytest

    from autotune.errors import AutotuneError
    from autotune.plan.plan import StagePlan

    fields = dict(has_embedding=False, has_head=False, num_gpus=8, tp=8, cp=1, dp=1, fp8=True)
    StagePlan(layers=(0, 1), **fields)
    assert StagePlan(layers=(3, 7), **fields).num_layers == 4  # taken from the checked set
    assert StagePlan(layers=(3, 7), **{**fields, "has_head": True}).has_head  # another place: the same checks
    with pytest.raises(AutotuneError, match="fp8"):
        StagePlan(layers=(3, 7), **{**fields, "fp8": 1})
    with pytest.raises(AutotuneError, match="activation_offload_layers"):  # the layers' own checks still run
        StagePlan(layers=(3, 4), **{**fields, "fp8": False, "activation_offload_layers": 1})
    StagePlan(layers=(3, 5), **{**fields, "fp8": False, "activation_offload_layers": 1})
    with pytest.raises(AutotuneError, match="activation_offload_layers"):
        StagePlan(layers=(3, 4), **{**fields, "fp8": False, "activation_offload_layers": 1, "has_head": True})


def test_a_choice_keeps_its_hash_within_its_process_only():
    """A StageChoice's kept hash is the dataclass's, and a pickled choice is found under an equal
    one in a process whose string hashes differ (the hash is not sent with it)."""
    import pickle
    import subprocess
    import sys
    from dataclasses import fields

    from autotune.search.choices import StageChoice

    choice = StageChoice(tp=2, cp=1, sequence_parallel=True, recompute="full", zero=1, mesh_order="tp-dp-cp",
                         placements=(("optimizer_in", "host"),))
    assert hash(choice) == hash(tuple(getattr(choice, f.name) for f in fields(choice)))
    fresh = ("from autotune.search.choices import StageChoice; import pickle, sys; "
             "c = StageChoice(tp=2, cp=1, sequence_parallel=True, recompute='full', zero=1, mesh_order='tp-dp-cp', "
             "placements=(('optimizer_in', 'host'),)); print({c: 1}.get(pickle.loads(sys.stdin.buffer.read())))")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", fresh], input=pickle.dumps(choice), capture_output=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == b"1"


def test_kept_cost_models_follow_the_degree_sizes_and_workload_of_each_context():
    """A slice context's cost model is kept by its parts' identity, degree and micro-batch sizes:
    the same one for an equal context, another for another degree, sizes or workload object."""
    from dataclasses import replace

    import numpy as np

    from autotune.graph.table import runtime_tables
    from autotune.search.tables import SliceContext, _phase_costers
    from autotune.spec.runtime import load_runtime

    model = load_preset("large")
    workload = TrainingWorkload(global_batch=64, seq_len=2048)
    runtime = load_runtime("megatron")
    ctx = SliceContext(tables=runtime_tables(model, workload, runtime), workload=workload, runtime=runtime,
                       cluster=load_cluster("dgx-h100"), dp=2, micro_batches=(1, 2), gpus=16)
    (_, kept), = _phase_costers(ctx)
    assert _phase_costers(replace(ctx))[0][1] is kept
    for other in (replace(ctx, dp=4), replace(ctx, micro_batches=(1, 4)), replace(ctx, workload=replace(workload))):
        (_, found), = _phase_costers(other)
        assert found is not kept
        assert np.array_equal(found.context.num_microbatches, other.num_microbatches)
        assert np.array_equal(found.context.micro_batch.ravel(), other.micro_batches)
    assert not kept.context.micro_batch.flags.writeable


def test_kept_moe_layer_terms_price_every_position_and_stage_as_afresh():
    """An MoE stage's place-free terms (cost/moe_stage.py: its layers' kernels, expert and TP/CP
    collectives, ZeRO traffic, host issue, expert state) are kept across its positions: first,
    middle and last stages (embedding, head, neighbours), at two first GPUs, every ZeRO stage and
    recomputation, with TP (the embedding's and head's TP collectives) and FP8, give what pricing
    each with nothing kept gives, time and memory, and the kept terms are shared (fewer kept than
    priced); the memory alone (moe_stage_memory) is the whole cost's."""
    import numpy as np

    from autotune.cost.contract import phase_cost_models
    from autotune.cost.stage import StagePosition
    from autotune.graph.table import model_tables
    from autotune.plan.plan import StagePlan
    from autotune.spec.runtime import load_runtime

    model, cluster, runtime = tiny_moe(num_layers=8), load_cluster("dgx-h100"), load_runtime("megatron")
    n = np.arange(1, 9)[None, :]
    inflight = np.array([0.0, 1.0]).reshape(2, 1, 1)
    cases = []
    for dtype in ("bf16", "fp8"):
        workload = TrainingWorkload(global_batch=64, seq_len=128, dtype=dtype)
        tables = model_tables(model, workload.seq_len, workload.activation_bytes, workload.attention_impl)
        (_, priced), = phase_cost_models(tables, workload, cluster, runtime=runtime, micro_batch=np.array([[1], [2]]),
                                         num_microbatches=np.array([[8], [4]]))
        for zero, recompute, first_gpu in itertools_product((0, 1, 2, 3), ("none", "full"), (0, 4)):
            for emb, head, neighbors in ((True, False, 1), (False, False, 2), (False, True, 1)):
                stage = StagePlan(layers=(0, 8), has_embedding=emb, has_head=head, num_gpus=8, tp=2, cp=1, dp=4,
                                  sequence_parallel=True, zero=zero, recompute=recompute, ep=2)
                pos = StagePosition(inflight=inflight, neighbors=neighbors, p2p_inter_node=False, first_gpu=first_gpu)
                cases.append((priced, stage, pos))

    def fresh_state():
        moe_stage._LAYERS.clear()
        moe_stage._LAYER_TIMES.clear()
        moe_stage._EXPERT_COSTS.clear()

    fresh_state()
    kept = [priced.stage_cost(stage, pos, num_layers=n) for priced, stage, pos in cases]
    assert 0 < len(moe_stage._LAYER_TIMES) <= len(cases) // 3
    fresh = []
    for priced, stage, pos in cases:
        fresh_state()
        fresh.append(priced.stage_cost(stage, pos, num_layers=n))
    assert all(_fields_equal(a, b) for a, b in zip(kept, fresh))
    assert all(_fields_equal(priced.stage_memory(stage, pos, num_layers=n), cost.memory)
               for (priced, stage, pos), cost in zip(cases, kept))
    first, middle, last = fresh[:3]  # the embedding's and head's TP collectives, kernels and parameters
    assert len({float(np.sum(c.time.tp_comm_s)) for c in (first, middle, last)}) == 3
    assert np.all(middle.params_per_gpu < first.params_per_gpu) and np.all(middle.params_per_gpu < last.params_per_gpu)
