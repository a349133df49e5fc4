"""Pipeline-parallel serving (pp > 1): an instance of tp x pp GPUs runs pp micro-batches in flight,
each crossing every layer's stage and pp - 1 activation sends (serving_step.ReplicaShape)."""

from __future__ import annotations

import pytest

from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import RowProblem, case_from_row
from autotune.cost.comm import level_time_s
from autotune.cost.serving_eval import ServingDeployment, expected_metric, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_step import ReplicaShape, step_model
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import load_runtime

ROW = dict(id="pp", source="test", model="Llama-3.1-70B-Instruct", hf_model_id="", arch="dense", params_b="70.6",
           gpu="H100-SXM-80GB", gpus="16", tp="4", pp="2", ep="", dp="", precision="fp8", engine="vLLM",
           engine_version="", isl="1024", osl="256", concurrency_or_batch="concurrency=64", metric="output_tokens_per_s",
           value="1", unit="tokens/s (16-GPU system)", notes="placeholder value")


def _steps(tp: int, pp: int, cluster: str = "dgx-h100"):
    return step_model(load_preset("llama3-70b"), load_cluster(cluster), ReplicaShape(tp=tp, pp=pp), weight_dtype="bf16",
                      kv_bytes=2, max_tokens=256, max_sampled=64)


def test_a_micro_batch_crosses_every_layer_and_the_stage_boundaries():
    one, two = _steps(4, 1), _steps(4, 2)
    act = 256 * 8192 * 2  # 256 tokens of hidden 8192 in BF16
    assert two.linear_s[256] - one.linear_s[256] == pytest.approx(level_time_s("send_recv", act, 2,
                                                                               load_cluster("dgx-h100").intra_node))
    cross = _steps(8, 2)  # 16 GPUs: the stage boundary is the node boundary, over the network
    assert cross.linear_s[256] - _steps(8, 1).linear_s[256] == pytest.approx(
        level_time_s("send_recv", act, 2, load_cluster("dgx-h100").inter_node))
    # a GPU holds half the layers and the fuller end stage's embedding or head
    assert 0.5 * one.weight_bytes_per_gpu < two.weight_bytes_per_gpu < 0.53 * one.weight_bytes_per_gpu
    assert two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu  # a micro-batch's share, all layers


def test_a_row_with_pp_splits_its_load_over_instances_and_micro_batches():
    case = case_from_row(ROW)
    dep = case.deployment
    assert (dep.tp, dep.pp, dep.replicas, dep.gpus) == (4, 2, 2, 16)
    assert case.load.concurrency == 16  # 64 over 2 instances x 2 micro-batches
    with pytest.raises(RowProblem, match="does not make the 16 GPUs"):
        case_from_row(dict(ROW, pp="3"))
    with pytest.raises(RowProblem, match="DP attention is not modelled"):
        case_from_row(dict(ROW, model="DeepSeek-R1", notes="enable_attention_dp"))


def test_an_instance_is_its_micro_batches_and_a_gpu_its_share():
    dep = ServingDeployment(model=load_preset("llama3-8b"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("vllm"), tp=1, pp=2, replicas=3)
    run = run_serving(dep, Load(kind="concurrency", num_requests=32, input_len=256, output_len=64, concurrency=8))
    one = metric_value(run.trace, "output_tokens_per_s")
    assert expected_metric((run,), "output_tokens_per_s", scope="replica") == pytest.approx(2 * one)
    assert expected_metric((run,), "output_tokens_per_s", scope="system") == pytest.approx(6 * one)
    assert expected_metric((run,), "output_tokens_per_s", scope="gpu") == pytest.approx(one)  # 2 x one over 2 GPUs


def test_deeper_pipelines_of_the_same_gpus_decode_slower_per_request():
    """At fixed concurrency a deeper pipeline drops the TP split of each step's weight reads: a
    request's tokens come slower (each micro-batch reads all the weights at TP 8 / pp)."""
    rows = [dict(ROW, id=f"tp{tp}", gpus="8", tp=str(tp), pp=str(8 // tp), metric="tpot_mean", unit="ms")
            for tp in (8, 2, 1)]
    tpot = {c.row_id: c.predicted for c in check_serving_rows(rows)}
    assert tpot["tp8"] < tpot["tp2"] < tpot["tp1"]
