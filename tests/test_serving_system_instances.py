"""A published MLPerf system's engine carries to another count of the same GPU as that many of its instances."""

from autotune.calibrate.serving_systems import published_system


def test_an_exact_entry_wins():
    system = published_system("mlperf-nvidia-5.1", "llama2-70b", "B200-SXM-180GB", 8, "Server scenario")
    assert system is not None and system.gpus == 8 and "its" not in system.config


def test_another_count_runs_the_same_instances():
    eight = published_system("mlperf-nvidia-5.1", "llama2-70b", "B200-SXM-180GB", 8, "Server scenario")
    four = published_system("mlperf-nvidia-5.1", "llama2-70b", "B200-SXM-180GB", 4, "Server scenario")
    assert four is not None and four.gpus == 4
    for key in ("tp", "precision", "max_num_seqs", "max_num_batched_tokens"):
        assert four.get(key) == eight.get(key)
    assert "4 of its instances" in four.note("tp")


def test_the_system_wide_loadgen_expectation_is_not_carried():
    eight = published_system("mlperf-nvidia-5.1", "llama2-70b", "B200-SXM-180GB", 8, "Offline scenario")
    four = published_system("mlperf-nvidia-5.1", "llama2-70b", "B200-SXM-180GB", 4, "Offline scenario")
    assert eight.get("offline_expected_qps") is not None
    assert four.get("offline_expected_qps") is None


def test_a_count_the_instance_does_not_divide_has_no_entry():
    # v4.1 H100 Llama 2 runs TP 2 instances: 3 GPUs hold no whole number of them
    assert published_system("mlperf-nvidia-4.1", "llama2-70b", "H100-SXM-80GB", 3, "Offline scenario") is None
    two = published_system("mlperf-nvidia-4.1", "llama2-70b", "H100-SXM-80GB", 4, "Offline scenario")
    assert two is not None and two.get("tp") == 2


def test_another_gpu_takes_nothing():
    assert published_system("mlperf-nvidia-5.1", "llama2-70b", "H100-SXM-80GB", 8, "Server scenario") is None


def test_the_system_wide_query_count_is_not_carried():
    eight = published_system("mlperf-nvidia-5.1", "deepseek-v3", "B200-SXM-180GB", 8, "Server scenario")
    sixteen = published_system("mlperf-nvidia-5.1", "deepseek-v3", "B200-SXM-180GB", 16, "Server scenario")
    assert eight.get("min_query_count") == 26328
    assert sixteen is not None and sixteen.get("min_query_count") is None and sixteen.get("tp") == eight.get("tp")
