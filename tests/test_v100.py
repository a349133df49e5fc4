"""NVIDIA V100 (Volta): device profiles, DGX-2 / DGX-1 presets, FP16-only dtypes, published V100 runs."""

import importlib.util
import json
from pathlib import Path

import pytest

from autotune.calibrate.modern import GPU_CLUSTERS
from autotune.calibrate.published import check_published
from autotune.calibrate.row_cells import canonical_gpu
from autotune.cli.main import main
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster, load_device

RUNS = "tests/data/v100_runs.csv"
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("cluster, device, gpus_per_node, peak_fp16, hbm_gib", [
    ("dgx-2", "V100-SXM3-32GB", 16, 130e12, 32), ("dgx-1-v100", "V100-SXM2-32GB", 8, 125e12, 32),
    ("dgx-1-v100-16gb", "V100-SXM2-16GB", 8, 125e12, 16)])
def test_presets_load_with_volta_numbers_and_sources(cluster, device, gpus_per_node, peak_fp16, hbm_gib):
    spec = load_cluster(cluster)
    assert spec.device.name == device and spec.gpus_per_node == gpus_per_node
    assert spec.device.peak("fp16") == peak_fp16
    assert spec.device.memory_bytes == hbm_gib * 2**30 and spec.device.tier("sram").capacity_bytes == 6 * 2**20
    # fitted speeds stay below the datasheet peaks they come from
    assert spec.device.regression("gemm", "fp16").throughput < peak_fp16
    assert spec.device.memory.throughput < spec.device.tier("hbm").bandwidth_bytes_per_s
    assert spec.device.kernel_efficiency == load_device("a100-80gb").kernel_efficiency  # shared, not refitted
    for link in (spec.intra_node, spec.inter_node, spec.host_link):
        assert link.source
    # NVLink 2 (6 links) is slower than A100's NVLink 3 (12), EDR InfiniBand slower than HDR
    a100 = load_cluster("dgx-a100-80gb")
    assert spec.intra_node.bandwidth_bytes_per_s < a100.intra_node.bandwidth_bytes_per_s
    assert spec.inter_node.bandwidth_bytes_per_s < a100.inter_node.bandwidth_bytes_per_s


def test_volta_has_no_bf16_tf32_or_fp8_tensor_cores():
    device = load_device("v100-sxm3-32gb")
    assert set(device.peak_flops) == {"fp16", "fp32"}
    device.require_dtype("fp16")
    for dtype in ("bf16", "fp8", "mxfp8"):
        with pytest.raises(AutotuneError) as err:
            device.require_dtype(dtype)
        assert err.value.field == "dtype" and "use fp16" in err.value.message


def _cli(capsys, args):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_fp16_prices_and_is_the_default_on_volta(capsys):
    code, out, _ = _cli(capsys, ["evaluate", "--model", "large", "--gpus", "16", "--cluster", "dgx-2", "--json"])
    assert code == 0
    data = json.loads(out)
    assert data["fits"] and data["step_time_s"] > 0 and 0 < data["mfu"] < 1
    assert data["assumed"]["dtype"] == "fp16"  # FP16 mixed precision by default, not fp32
    code, out, _ = _cli(capsys, ["evaluate", "--model", "large", "--gpus", "16", "--cluster", "dgx-2", "--dtype",
                                 "fp16", "--json"])
    assert code == 0 and json.loads(out)["step_time_s"] == pytest.approx(data["step_time_s"])


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_bf16_and_fp8_are_refused_in_one_line(capsys, dtype):
    code, out, err = _cli(capsys, ["evaluate", "--model", "large", "--gpus", "16", "--cluster", "dgx-2",
                                   "--dtype", dtype])
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1
    assert f"cannot run {dtype}" in err and "V100-SXM3-32GB" in err


def test_search_finds_a_plan_on_a_dgx2(capsys):
    code, out, _ = _cli(capsys, ["search", "--model", "large", "--gpus", "16", "--cluster", "dgx-2",
                                 "--no-run-dir", "--quiet", "--json"])
    assert code == 0
    data = json.loads(out)
    assert data["estimate"]["fits"] and data["plan"]["gpus"] == 16
    assert data["estimate"]["peak_memory_bytes_per_gpu"] <= 32 * 2**30


@pytest.mark.parametrize("spelling, canonical", [
    ("Tesla V100-SXM3-32GB", "V100-SXM3-32GB"), ("Tesla V100-SXM3-32GB-H", "V100-SXM3-32GB"),
    ("V100 SXM3", "V100-SXM3-32GB"), ("DGX-2H", "V100-SXM3-32GB"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"), ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
    ("V100", None), ("V100-32GB", None), ("V100 32GB", None), ("V100-SXM2", None), ("V100 PCIe 32GB", None),
    ("V100S-PCIE-32GB", None),
])
def test_only_v100_spellings_that_name_the_board_are_mapped(spelling, canonical):
    assert canonical_gpu(spelling, tuple(GPU_CLUSTERS)) == canonical


def _unfused_script():
    spec = importlib.util.spec_from_file_location("v100_unfused", ROOT / "scripts" / "v100_unfused_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["v100-sxm3-32gb", "v100-sxm2-32gb", "v100-sxm2-16gb"])
def test_the_attention_fit_is_what_the_unfused_operators_cost(name):
    """No FlashAttention on Volta: the shipped fit must equal the derivation from the profile's own
    GEMM and memory fits (scripts/v100_unfused_attention.py), so it cannot go stale when they change."""
    script = _unfused_script()
    base = load_device(name)
    device = base.with_changes(compute={k: v for k, v in base.compute.items() if k[0] != "attention"})
    _, spf128 = script.fit(device, 128)
    _, spf64 = script.fit(device, 64)
    assert base.regression("attention", "fp16").seconds_per_unit == pytest.approx(spf128, rel=0.01)
    assert base.attention_head_dim_64_speed == pytest.approx(spf128 / spf64, abs=0.005)
    # unfused attention runs well below the GEMM rate (it streams the s x s scores through HBM)
    assert base.regression("attention", "fp16").throughput < 0.7 * base.regression("gemm", "fp16").throughput


@pytest.mark.parametrize("seq, head_dim", [(1024, 64), (1024, 96), (2048, 64), (2048, 128)])
def test_the_fused_attention_operator_costs_what_the_unfused_operators_cost(monkeypatch, seq, head_dim):
    """Across sequence lengths and head dims (the fit is taken at 1024 and 128) the fused operator,
    priced with the V100 fit, and Megatron's unfused operators, priced with the GEMM and memory fits,
    agree within 10% (the log2 head-dim interpolation of cost/compute.py is the rest)."""
    script = _unfused_script()
    monkeypatch.setattr(script, "SEQ", seq)
    base = load_device("v100-sxm3-32gb")
    device = base.with_changes(compute={k: v for k, v in base.compute.items() if k[0] != "attention"})
    for micro_batch in (1, 8):
        fused = script._attention_s(base, head_dim, "flash", micro_batch)
        unfused = script._attention_s(device, head_dim, "unfused", micro_batch)
        assert fused == pytest.approx(unfused, rel=0.1)


def test_flash_and_unfused_plans_price_alike_on_volta():
    import autotune
    from autotune.spec.presets import load_preset
    from autotune.spec.runtime import Runtime
    from autotune.spec.workload import TrainingWorkload

    model = load_preset("gpt3-1.3b").with_changes(dropout=False)  # attention dropout only exists unfused
    steps = [autotune.evaluate(model, 16, cluster="dgx-1-v100", runtime=Runtime(name="neutral"), workload=TrainingWorkload(
        global_batch=64, seq_len=2048, dtype="fp16", attention_impl=impl)).step_time_s for impl in ("flash", "unfused")]
    assert steps[0] == pytest.approx(steps[1], rel=0.05)


def test_published_v100_runs_are_priced_within_a_loose_bound():
    """Every row of tests/data/v100_runs.csv is priced. The cost model prices them as Megatron-Core
    would run them (overlapped gradient all-reduce, no dropout, fused elementwise kernels;
    calibrate/modern.py), which Megatron-LM of 2019 did not: it can only be faster than the paper,
    never much slower, and not by more than those omitted costs plus its fits' spread allow."""
    checks, skipped = check_published(RUNS)
    assert not skipped, [s.reason for s in skipped]
    assert len(checks) == 11
    for check in checks:
        assert check.run.cluster_name == "dgx-2"
        assert -0.6 < check.error < 0.1, (check.run.run_id, check.error)


def test_megatron_rows_of_2019_to_2021_run_that_code(data_dir):
    """Megatron-LM rows of 2019-2021 are priced as that code ran (calibrate/modern.py megatron_legacy):
    unfused attention (2019: with the eager scale and mask, before the fused scale-mask-softmax of
    2020-09), dropout, nothing overlapped; a Megatron row without a year keeps today's defaults."""
    import csv

    from autotune.calibrate.modern import modern_run_from_row

    with open(data_dir / "v100_runs.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    model, workload, runtime, _, plan, _ = modern_run_from_row(row)
    assert runtime.name == "megatron-2019" and runtime.attention_impl == "unfused_eager_mask"
    assert workload.attention_impl == "unfused_eager_mask" and model.dropout
    assert not (plan.overlap_grad_reduce or plan.overlap_tp_comm or plan.overlap_p2p_comm)
    of_2021 = {k: v.replace("2019", "2021") for k, v in row.items()}
    _, workload, runtime, *_ = modern_run_from_row(of_2021)
    assert runtime.name == "megatron-2021" and workload.attention_impl == "unfused"
    today = dict(row, framework="Megatron-LM", source="Megatron-LM benchmark", gpu="A100-SXM4-80GB")
    model, workload, runtime, _, plan, _ = modern_run_from_row(today)
    assert runtime.name == "megatron"
    assert workload.attention_impl == "flash" and not model.dropout and plan.overlap_grad_reduce
