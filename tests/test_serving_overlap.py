"""SGLang's DeepEP exchange and two-batch overlap (autotune/cost/serving_overlap.py): how the flags are
read, DeepEP's volumes, and the overlapped step against the serial one."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import ServingDeployment
from autotune.cost.serving_overlap import (LayerParts, MoeExchange, deepep_exchange_s, exchange_from_notes,
                                           overlapped_step_s, two_batch_s)
from autotune.cost.serving_phase import phase_tokens_per_gpu_s
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

CHECK = Path(__file__).parent / "data" / "sglang_newer_check.csv"
LAYERS = 58


def _parts(compute: float, exchange: float) -> LayerParts:
    return LayerParts(other=compute / 2, attention=0.0, experts=compute / 2, dispatch=exchange / 3, combine=2 * exchange / 3)


def test_flags_name_deepeps_mode_and_the_overlap():
    flags = "--enable-dp-attention --enable-deepep-moe --deepep-mode low_latency --enable-two-batch-overlap"
    assert exchange_from_notes(flags, "decode") == MoeExchange(mode="low_latency", two_batch_overlap=True)
    # auto mode: normal kernels for prefill, low-latency for decode (SGLang's DeepEPMode.resolve)
    assert exchange_from_notes("--enable-deepep-moe", "prefill") == MoeExchange(mode="normal")
    assert exchange_from_notes("--moe-a2a-backend deepep", "decode").mode == "low_latency"
    assert exchange_from_notes("--enable-two-batch-overlap", "decode") is None  # no DeepEP flag: the step model's own
    with pytest.raises(AutotuneError, match="deepep_mode"):
        exchange_from_notes("--enable-deepep-moe --deepep-mode fast", "decode")


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize(("compute", "exchange"), [(1e-3, 1e-4), (1e-3, 1e-3), (1e-4, 1e-3), (3e-3, 2e-3)])
def test_overlap_is_never_slower_than_serial_nor_faster_than_either_stream(phase, compute, exchange):
    parts = _parts(compute, exchange)
    overlapped = two_batch_s(parts, layers=LAYERS, phase=phase)
    assert overlapped <= 2 * LAYERS * parts.serial_s + 1e-12  # two micro-batches one after the other
    assert overlapped >= 2 * LAYERS * max(compute, exchange) - 1e-12  # neither stream does less than its work


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_when_one_stream_dominates_the_step_is_its_work_plus_the_ends(phase):
    compute_bound = two_batch_s(_parts(1e-3, 1e-5), layers=LAYERS, phase=phase)
    assert compute_bound == pytest.approx(2 * LAYERS * 1e-3, rel=0.01)
    exchange_bound = two_batch_s(LayerParts(other=1e-5, attention=1e-5, experts=1e-5, dispatch=1e-3, combine=1e-3),
                                 layers=LAYERS, phase=phase)
    assert exchange_bound == pytest.approx(2 * LAYERS * 2e-3, rel=0.01)


def test_normal_kernels_slow_the_compute_they_overlap_and_low_latency_ones_do_not():
    parts = _parts(1e-3, 1e-3)
    normal = overlapped_step_s(parts, layers=LAYERS, phase="prefill", mode="normal")
    assert normal > overlapped_step_s(parts, layers=LAYERS, phase="prefill", mode="low_latency")
    assert normal == pytest.approx(two_batch_s(parts, layers=LAYERS, phase="prefill", sm_share=20 / 132))
    no_exchange = replace(parts, dispatch=0.0, combine=0.0)  # nothing beside the compute: nothing slowed
    assert overlapped_step_s(no_exchange, layers=LAYERS, phase="prefill", mode="normal") == pytest.approx(2 * LAYERS * 1e-3)


def test_deepep_normal_sends_a_token_once_a_node_in_fp8_and_combines_in_bf16():
    model, cluster = resolve_model("deepseek-v3"), load_cluster("dgx-h100")
    dispatch, combine = deepep_exchange_s(model, cluster, ep=32, tokens_per_rank=4096, mode="normal")
    assert combine / dispatch == pytest.approx(2.0 / (1 + 4 / 128) * 58 / 57, rel=1e-6)  # BF16 vs FP8 + scales
    # 8 experts in 4 of 8 groups, 2 groups a node: at most the 4 * (1 - C(6,4) / C(8,4)) = 3.14 nodes its
    # groups reach (a picked group may get none of the 8), far fewer than its 8 copies
    copies = dispatch * 58e9 * cluster.inter_node.bandwidth_bytes_per_s / 50e9 / (4096 * 7168 * (1 + 4 / 128))
    assert 2.5 < copies < 4 * (1 - 15 / 70)
    low_dispatch, low_combine = deepep_exchange_s(model, cluster, ep=32, tokens_per_rank=4096, mode="low_latency")
    assert low_dispatch > 2 * dispatch and low_combine > 2 * combine  # every expert copy by RDMA


def test_low_latency_matches_the_readme_at_its_own_setting():
    # DeepEP README @1a0c8f6: EP64, 128 tokens, dispatch 186 us, combine 353 us on ~50 GB/s NICs
    model = resolve_model("deepseek-v3")
    cluster = load_cluster("dgx-h100")
    scale = cluster.inter_node.bandwidth_bytes_per_s / 50e9
    dispatch, combine = deepep_exchange_s(model, cluster, ep=64, tokens_per_rank=128, mode="low_latency")
    assert dispatch * scale == pytest.approx(186e-6, rel=0.03)
    assert combine * scale == pytest.approx(353e-6, rel=0.03)


def test_a_source_naming_deepep_in_words_runs_its_kernels_without_the_overlap():
    assert exchange_from_notes("DP attention + DeepEP low_latency", "decode") == MoeExchange(mode="low_latency")
    assert exchange_from_notes("DeepEP normal kernels", "prefill").mode == "normal"
    assert exchange_from_notes("two-batch overlap disabled; DeepEP", "prefill") == MoeExchange(mode="normal")


def test_low_latency_inside_one_nvlink_domain_goes_over_nvlink():
    # GB200 NVL72: 48 EP ranks in one NVLink domain, none of the copies crosses a NIC
    model = resolve_model("deepseek-v3")
    nvl72, h100 = load_cluster("gb200-nvl72"), load_cluster("dgx-h100")
    over_nvlink = deepep_exchange_s(model, nvl72, ep=48, tokens_per_rank=256, mode="low_latency")
    over_rdma = deepep_exchange_s(model, h100, ep=48, tokens_per_rank=256, mode="low_latency")
    assert over_nvlink[0] < over_rdma[0] / 3 and over_nvlink[1] < over_rdma[1] / 3


def _case(row_id: str):
    with open(CHECK, newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["id"] == row_id)
    return case_from_row(row)


@pytest.mark.parametrize("row_id", ["sglnew-032", "sglnew-035"])
def test_the_lmsys_rows_run_deepep_with_two_batch_overlap_and_gain_from_it(row_id):
    case = _case(row_id)
    p = case.phase
    assert p.exchange is not None and p.exchange.two_batch_overlap
    assert p.exchange.mode == ("normal" if p.phase == "prefill" else "low_latency")

    def rate(exchange):
        return phase_tokens_per_gpu_s(case.deployment, phase=p.phase, per_rank=p.per_rank, context=p.context,
                                      exchange=exchange)

    serial, overlapped = rate(replace(p.exchange, two_batch_overlap=False)), rate(p.exchange)
    assert serial < overlapped < 2 * serial  # overlap hides exchange, at most all of it


def test_a_deployment_without_ep_ignores_the_exchange():
    dep = ServingDeployment(model=resolve_model("deepseek-v3"), cluster=load_cluster("dgx-h100"),
                            runtime=load_runtime("sglang"), tp=8, ep=1, attention_dp=True, weight_dtype="fp8")
    plain = phase_tokens_per_gpu_s(dep, phase="decode", per_rank=64, context=1000)
    flagged = phase_tokens_per_gpu_s(dep, phase="decode", per_rank=64, context=1000,
                                     exchange=MoeExchange(mode="low_latency", two_batch_overlap=True))
    assert flagged == plain
