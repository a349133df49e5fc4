"""scripts/trtllm_moe_terms.py: it reads aiconfigurator's MoE module for the row's expert shape and dtype only, at
the engine's default split (moe_tp = tp) and at moe_ep = tp, the median of a point's repeated draws."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]


def _script():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("trtllm_moe_terms", ROOT / "scripts" / "trtllm_moe_terms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(tokens, ms, *, tp=8, ep=1, inter=1536, source="moe_torch_flow_cutlass", dist="power_law_1.2"):
    return dict(kernel_source=source, moe_dtype="nvfp4", hidden_size=4096, inter_size=inter, num_experts=128, topk=8,
                moe_tp_size=tp, moe_ep_size=ep, distribution=dist, num_tokens=tokens, latency=ms)


def test_the_shape_the_splits_and_the_median_of_draws(tmp_path):
    rows = [_row(1024, 0.2), _row(2048, 0.3), _row(2048, 0.7), _row(2048, 0.35),  # three draws at 2,048: median 0.35
            _row(1024, 9.0, inter=2048), _row(2048, 9.0, inter=2048),  # another shape
            _row(1024, 0.1, tp=1, ep=8), _row(2048, 0.15, tp=1, ep=8),
            _row(1024, 5.0, tp=2, ep=4), _row(2048, 5.0, tp=2, ep=4)]  # a split neither reading runs
    pd.DataFrame(rows).to_parquet(tmp_path / "b200_sxm_moe_1.3.0rc20.parquet")
    (tmp_path / "b200_sxm_moe_1.3.0rc15.parquet").write_bytes(b"")  # an empty file is skipped
    model = SimpleNamespace(hidden_size=4096, expert_ffn_hidden_size=1536.0, num_experts=128, num_experts_per_token=8,
                            fp8_block_scaled=False, router_groups=0, is_moe=True, name="qwen3")
    dep = SimpleNamespace(model=model, dtype="nvfp4", tp=8, cluster=SimpleNamespace(device=SimpleNamespace(name="B200")))
    got = {label: (ms, per_token) for label, ms, per_token in _script().measured_layers(tmp_path, dep, 2048)}
    assert got == {"1.3.0rc20 CUTLASS moe_tp 8 moe_ep 1 power_law_1.2": (pytest.approx(0.35), pytest.approx(0.35 / 2048)),
                   "1.3.0rc20 CUTLASS moe_tp 1 moe_ep 8 power_law_1.2": (pytest.approx(0.15), pytest.approx(0.15 / 2048))}
