"""How many samples MLPerf LoadGen's one Offline query holds, from the system's published harness settings.

LoadGen issues every Offline sample at once, as one query of max(min_query_count, 1.1 x min_duration x
offline_expected_qps) samples (the slack makes the run outlast min_duration). A run of that many requests
ends in a drain (the last admitted requests decoding in a shrinking batch) that weighs less the longer
the run: pricing a shorter run over-weights it. min_query_count is the harness config's where it sets one
(NVIDIA's deepseek-r1 configs: 26328 on B200 x8), else mlperf.conf's for the benchmark (the dataset's
``offline_samples`` in serving_datasets.toml). LoadGen v5.x then rounds the query up to whole sample sets
(sample_concatenate_permutation; the logs' generated_samples_per_query, e.g. 992,640 -> 1,007,616 for
Llama 2 70B on B200 x8): at most one set more, not modelled.
"""

from __future__ import annotations

__all__ = ["offline_requests"]


def offline_requests(system, run_s: float, dataset: dict, replicas: int) -> tuple[int, tuple[str, ...]] | None:
    """(requests per replica, the note) of LoadGen's Offline query under a ``run_s`` min_duration, where the
    ``system`` (serving_systems.PublishedSystem) publishes its offline_expected_qps; else None."""
    qps = system.get("offline_expected_qps") if system is not None else None
    if not qps:
        return None
    floor = int(system.get("min_query_count") or dataset.get("offline_samples", {}).get("value") or 1)
    # mlcommons/inference@006f3a5a7fa8 loadgen/test_settings_internal.cc TestSettingsInternal (Offline):
    # samples_per_query = max(min_query_count, uint64(kSlack 1.1 x min_duration_s x offline_expected_qps))
    samples = max(floor, int(1.1 * run_s * qps))
    n = max(1, samples // replicas)
    return n, (f"{n} requests per replica: LoadGen's Offline query of {samples} samples, max(min_query_count {floor}, "
               f"1.1 x {run_s:g} s x {qps:g}/s) ({system.note('offline_expected_qps')})",)
