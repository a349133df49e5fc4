"""Speed of `autotune search` (issue 3's targets; a benchmark, not a test).

    python scripts/bench_search.py [--quick]

Prints: `autotune search --model large --gpus 16` wall time as a user runs it (a fresh
interpreter, run directory and SQLite study included; target <= 3 s on the 2-core CI machine),
GPT-3 175B on 1024 A100 (target <= 60 s), a 1T-parameter GPT on 3072 A100 (target <= 120 s),
and the exhaustive-to-default time ratio of each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")


def cli_wall_s(repeats: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "large", "--gpus", "16",
                            "--runs-dir", runs, "--quiet"], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times


def library_s(model, gpus: int, cluster: str, method: str, workload=None) -> tuple[float, object]:
    from autotune.search.api import search

    start = time.perf_counter()
    result = search(model, gpus, cluster=cluster, method=method, workload=workload)
    return time.perf_counter() - start, result


def one_trillion():
    """The 1T GPT of Narayanan et al. SC'21 Table 1 (128 layers, hidden 25600, 160 heads)."""
    from autotune.spec.model import ModelSpec
    from autotune.spec.workload import TrainingWorkload

    model = ModelSpec(name="gpt-1t", num_layers=128, hidden_size=25600, num_heads=160, num_kv_heads=160,
                      ffn_hidden_size=102400, ffn_activation="gelu", vocab_size=51200, max_seq_len=2048,
                      tied_embeddings=True, dropout=True)
    return model, TrainingWorkload(global_batch=3072, seq_len=2048)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the large/16 case")
    args = parser.parse_args()
    walls = cli_wall_s(5)
    print(f"autotune search --model large --gpus 16: median {statistics.median(walls):.2f} s wall "
          f"(min {min(walls):.2f}, max {max(walls):.2f}; target <= 3 s)")
    cases = [("large", 16, "dgx-h100", None, 3)]
    if not args.quick:
        model_1t, work_1t = one_trillion()
        cases += [("gpt3-175b", 1024, "dgx-a100-80gb", None, 60), (model_1t, 3072, "dgx-a100-80gb", work_1t, 120)]
    for model, gpus, cluster, workload, target in cases:
        default_s, result = library_s(model, gpus, cluster, "optuna", workload)
        exhaustive_s, reference = library_s(model, gpus, cluster, "exhaustive", workload)
        name = model if isinstance(model, str) else model.name
        same = abs(result.estimate.step_time_s - reference.estimate.step_time_s) <= 1e-9 * reference.estimate.step_time_s
        print(f"{name} on {gpus} GPUs ({cluster}): default {default_s:.1f} s (target <= {target} s), "
              f"exhaustive {exhaustive_s:.1f} s, exhaustive/default {exhaustive_s / default_s:.2f}; "
              f"step {result.estimate.step_time_s:.3f} s, MFU {100 * result.estimate.mfu:.1f}%, "
              f"{'same plan quality' if same else 'DIFFERENT optimum'}; {result.stats.num_trials} trials in "
              f"{result.stats.num_intra_op_studies} intra-op studies, {result.stats.num_slices} slices")


if __name__ == "__main__":
    main()
