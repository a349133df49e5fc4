"""aiconfigurator's WideEP MoE compute rows against the CUTLASS MoE table the step model prices DeepSeek-R1 with.

MLPerf v5.1's DeepSeek-R1 configs run trtllm_runtime_flags moe_backend WIDEEP (no load balancer). The step model
prices its routed experts from autotune/data/trtllm_moe.toml (scripts/extract_trtllm_moe.py: the CUTLASS fused-MoE
rows, moe_torch_flow_cutlass, power-law draws pooled). aiconfigurator @095f58a5 also measured the WideEP module's
compute on B200 (systems/data/b200_sxm/moe/trtllm/1.3.0rc10/wideep_moe_perf.parquet, kernel_source
wideep_compute_cutlass: collector/wideep/trtllm/collect_moe_compute.py times EP rank 0 on the tokens routed to it,
collector/helper.py power_law_logits_v3 giving rank 0 the heaviest load). This prints, per token count, the WideEP
time, the table's time and their ratio at DeepSeek's shape (7168 x 2048, 256 experts, top 8), moe_ep 8, alpha 1.01.
A diagnostic, not priced (docs/serving.md "MLPerf's TensorRT NVFP4 GEMMs", dslin47).

    python scripts/wideep_moe_compare.py <aiconfigurator git dir>   (needs pandas + pyarrow)
"""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd

_PARQUET = "HEAD:aic-core/src/aiconfigurator_core/systems/data/b200_sxm/moe/trtllm/1.3.0rc10/wideep_moe_perf.parquet"
_TABLE_KEY = "b200.cutlass.nvfp4.7168x2048x256x8@1.01.1x8"
_TABLE = Path(__file__).resolve().parent.parent / "autotune" / "data" / "trtllm_moe.toml"


def _wideep(git_dir: str) -> pd.DataFrame:
    blob = subprocess.run(["git", f"--git-dir={git_dir}", "show", _PARQUET], capture_output=True, check=True).stdout
    d = pd.read_parquet(io.BytesIO(blob))
    keep = ((d.hidden_size == 7168) & (d.inter_size == 2048) & (d.num_experts == 256) & (d.num_slots == 256)
            & (d.moe_ep_size == 8) & (d.op_name == "wideep_moe") & (d.distribution == "power_law_1.01"))
    return d[keep].sort_values("num_tokens")


def main(git_dir: str) -> None:
    points, ms = tomllib.loads(_TABLE.read_text())["layers"][_TABLE_KEY]
    table = dict(zip(points, ms))
    print("tokens  rank0_tokens  wideep_ms  table_ms  ratio")
    for row in _wideep(git_dir).itertuples():
        if row.num_tokens in table:
            ours = table[row.num_tokens]
            print(f"{row.num_tokens:6d}  {row.rank0_num_tokens:12d}  {row.latency:9.3f}  {ours:8.3f}  {row.latency / ours:5.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
