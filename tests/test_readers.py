"""One reader per file kind (issue 29): Hugging Face config.json, search-space TOML, cluster files
and profiles. Bad contents give exit 2 and one line naming the field (with its path in the file)
and what is valid, at once, with no traceback and nothing written; special files (FIFOs,
devices, directories) are refused without blocking."""

from __future__ import annotations

import json
import os
import random
import re
import time
import tomllib
from pathlib import Path

import pytest

from autotune.cli.main import main
from autotune.errors import AutotuneError

ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads((ROOT / "tests/data/hf/llama-3-8b.json").read_text())
DEEPSEEK = json.loads((ROOT / "tests/data/hf_configs/deepseek-v3.json").read_text())


def refused(capsys, tmp_path: Path, argv: list[str], field: str) -> str:
    """``argv`` exits 2 within seconds with one line naming ``field``, and writes nothing."""
    before = sorted(p.name for p in tmp_path.iterdir())
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    assert field in err, err
    assert elapsed < 15, f"{elapsed:.1f} s"  # seconds on a busy 2-core machine; the bad cases took minutes or hung
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err


def _with(base: dict, **changes) -> str:
    return json.dumps({**base, **changes})


def _raw(base: dict, key: str, literal: str) -> str:
    """``base`` with ``key`` set to a JSON literal json.dumps cannot write (Infinity, NaN)."""
    return json.dumps({**base, key: "@@"}).replace('"@@"', literal)


# name -> (config.json text, what the one line names)
HF_CASES = {
    "rope-scaling-list": (_with(LLAMA, rope_scaling=[1, 2]), "config.rope_scaling: must be an object"),
    "rope-scaling-number": (_with(LLAMA, rope_scaling=5), "config.rope_scaling: must be an object"),
    "rope-scaling-string": (_with(LLAMA, rope_scaling="linear"), "config.rope_scaling: must be an object"),
    "rope-factor-zero": (_with(LLAMA, rope_scaling={"rope_type": "linear", "factor": 0}), "config.rope_scaling.factor"),
    "rope-factor-negative": (_with(LLAMA, rope_scaling={"rope_type": "linear", "factor": -2}), "config.rope_scaling.factor"),
    "rope-factor-string": (_with(LLAMA, rope_scaling={"rope_type": "linear", "factor": "2"}), "config.rope_scaling.factor"),
    "rope-factor-infinity": (_with(LLAMA, rope_scaling={"rope_type": "linear", "factor": "@@"}).replace('"@@"', "Infinity"),
                             "config.rope_scaling.factor: must be a finite number"),
    "rope-type-list": (_with(LLAMA, rope_scaling={"rope_type": ["yarn"], "factor": 4}), "config.rope_scaling.rope_type"),
    "rope-type-unknown": (_with(LLAMA, rope_scaling={"rope_type": "ntk-magic", "factor": 4}), "config.rope_scaling.rope_type"),
    "llama3-low-string": (_with(LLAMA, rope_scaling={"rope_type": "llama3", "factor": 8, "low_freq_factor": "x"}),
                          "config.rope_scaling.low_freq_factor"),
    "llama3-high-zero": (_with(LLAMA, rope_scaling={"rope_type": "llama3", "factor": 8, "high_freq_factor": 0}),
                         "config.rope_scaling.high_freq_factor"),
    "yarn-beta-string": (_with(LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4, "beta_fast": "fast"}),
                         "config.rope_scaling.beta_fast"),
    "yarn-beta-negative": (_with(LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4, "beta_slow": -1}),
                           "config.rope_scaling.beta_fast"),
    "yarn-original-string": (_with(LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4,
                                                        "original_max_position_embeddings": "4k"}),
                             "config.rope_scaling.original_max_position_embeddings"),
    "rope-parameters-list": (_with(LLAMA, rope_parameters=[1]), "config.rope_parameters: must be an object"),
    "rope-theta-infinity": (_raw(LLAMA, "rope_theta", "Infinity"), "config.rope_theta: must be a finite number"),
    "rope-theta-nan": (_raw(LLAMA, "rope_theta", "NaN"), "config.rope_theta: must be a finite number"),
    "rope-theta-1e999": (_raw(LLAMA, "rope_theta", "1e999"), "config.rope_theta: must be a finite number"),
    "rope-theta-zero": (_with(LLAMA, rope_theta=0), "config.rope_theta"),
    "routed-scaling-infinity": (json.dumps(DEEPSEEK).replace('"routed_scaling_factor": 2.5',
                                                             '"routed_scaling_factor": Infinity'),
                                "config.routed_scaling_factor: must be a finite number"),
    "routed-scaling-zero": (_with(DEEPSEEK, routed_scaling_factor=0), "config.routed_scaling_factor"),
    "hidden-act-banana": (_with(LLAMA, hidden_act="banana"), "config.hidden_act: 'banana' is not valid"),
    "hidden-act-number": (_with(LLAMA, hidden_act=3), "config.hidden_act: must be a string"),
    "layers-100000": (_with(LLAMA, num_hidden_layers=100_000), "config.num_hidden_layers: 100,000 is beyond"),
    "layers-1e9-moe": (_with(DEEPSEEK, num_hidden_layers=10**9), "config.num_hidden_layers"),
    "layers-string": (_with(LLAMA, num_hidden_layers="32"), "config.num_hidden_layers: must be an integer"),
    "hidden-huge": (_with(LLAMA, hidden_size=10**9), "config.hidden_size"),
    "heads-zero": (_with(LLAMA, num_attention_heads=0), "config.num_attention_heads: must be a positive integer"),
    "tie-string": (_with(LLAMA, tie_word_embeddings="no"), "config.tie_word_embeddings: must be true or false"),
    "model-type-list": (_with(LLAMA, model_type=["llama"]), "config.model_type"),
    "top-level-list": ("[1, 2]", "must hold a JSON object"),
    "nested-100000": ('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "binary": (bytes(range(256)).decode("latin-1"), "not UTF-8"),
    "empty": ("", "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(HF_CASES))
def test_bad_hf_config_is_one_line(capsys, tmp_path, monkeypatch, name):
    text, field = HF_CASES[name]
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_bytes(text.encode("latin-1") if name == "binary" else text.encode())
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", str(path), "--gpus", "8"], field)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "long-name", "missing"])
def test_special_files_as_config_are_refused_without_blocking(capsys, tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    if kind == "fifo":
        path = tmp_path / "config.json"
        os.mkfifo(path)  # no writer: a blocking open or read would wait forever
    elif kind == "device":
        path = Path("/dev/zero")  # endless: a plain read would exhaust memory
    elif kind == "directory":
        path = tmp_path / "a.json"
        path.mkdir()
    elif kind == "long-name":
        path = tmp_path / ("x" * 300 + ".json")  # longer than the 255 bytes a file name may have
    else:
        path = tmp_path / "none.json"
    err = refused(capsys, tmp_path, ["evaluate", "--model", str(path), "--gpus", "8"], "model")
    assert {"fifo": "FIFO", "device": "not a regular file", "directory": "directory", "long-name": "too long",
            "missing": "No such file"}[kind] in err


def test_rope_yarn_betas_are_read_as_transformers_reads_them():
    """beta_fast 0 or null takes the default 32, as transformers' _compute_yarn_parameters does
    (``or 32``): not an error, the consumer's reading."""
    from autotune.spec.hf_config import model_from_hf_dict

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    zero = model_from_hf_dict({**LLAMA, "rope_scaling": {**yarn, "beta_fast": 0, "beta_slow": None}})
    assert (zero.rope_beta_fast, zero.rope_beta_slow) == (32.0, 1.0)


def test_accepted_activations_are_transformers_names():
    """Every name the reader accepts is one transformers' models look up (ACT2FN); others are refused."""
    activations = pytest.importorskip("transformers.activations")
    from autotune.spec.hf_config import model_from_hf_dict
    from autotune.spec.hf_families import HF_ACTIVATIONS

    assert set(HF_ACTIVATIONS) <= set(activations.ACT2CLS)
    for name in ("banana", "SiLU", "swiglu"):
        assert name not in activations.ACT2CLS
        with pytest.raises(AutotuneError, match="config.hidden_act"):
            model_from_hf_dict({**LLAMA, "hidden_act": name})


def test_library_dicts_are_checked_like_files():
    from autotune.spec.hf_config import model_from_hf_dict

    with pytest.raises(AutotuneError, match="config.rope_theta: must be a finite number"):
        model_from_hf_dict({**LLAMA, "rope_theta": float("inf")})
    with pytest.raises(AutotuneError, match="config"):
        model_from_hf_dict([LLAMA])  # type: ignore[arg-type]
    long = model_from_hf_dict({**LLAMA, "_name_or_path": "org/" + "m" * 400})
    assert 0 < len(long.name) <= 128  # it names run directories (255 bytes a name)


def _brute_windows(windowed: list[int], layers: int) -> dict | None:
    for n in range(1, layers + 1):
        if windowed == list(range(0, layers, n)):
            return {"sliding_window": 7, "sliding_window_every": n}
    for n in range(2, layers + 1):
        if windowed == [i for i in range(layers) if (i + 1) % n]:
            return {"sliding_window": 7, "full_attention_every": n}
    return None


def _brute_moe(moe: list[int], layers: int) -> dict:
    best = None
    for freq in range(1, layers + 1):
        pattern = set(range(moe[0], layers, freq))
        if set(moe) <= pattern and (best is None or len(pattern - set(moe)) <= len(best[1])):
            best = (freq, sorted(pattern - set(moe)))
    return {"first_k_dense_layers": moe[0], "moe_layer_frequency": best[0], "mlp_only_layers": tuple(best[1])}


def test_layer_patterns_match_the_search_over_every_frequency():
    """windowed_layers and moe_layer_pattern read the pattern off the layers in one pass; they
    give what trying every n gave (which was quadratic: minutes for 1e5 layers)."""
    from autotune.spec.hf_families import moe_layer_pattern, windowed_layers

    rng = random.Random(29)
    for _ in range(3000):
        layers = rng.randint(1, 30)
        pick = rng.random()
        if pick < 0.3:
            windowed = list(range(0, layers, rng.randint(1, layers)))
        elif pick < 0.6:
            n = rng.randint(2, layers + 1)
            windowed = [i for i in range(layers) if (i + 1) % n]
        else:
            windowed = sorted(rng.sample(range(layers), rng.randint(0, layers)))
        expected = _brute_windows(windowed, layers) if windowed else {"sliding_window": 0}
        if expected is None:
            with pytest.raises(AutotuneError, match="layer_types"):
                windowed_layers(windowed, layers, 7)
        else:
            assert windowed_layers(windowed, layers, 7) == expected, windowed
        moe = sorted(rng.sample(range(layers), rng.randint(1, layers)))
        assert moe_layer_pattern(moe, layers) == _brute_moe(moe, layers), moe
    start = time.monotonic()
    windowed_layers([i for i in range(10_000) if (i + 1) % 6], 10_000, 1024)
    moe_layer_pattern(list(range(3, 10_000)), 10_000)
    assert time.monotonic() - start < 5


# ---- search spaces -------------------------------------------------------------------------

SPACE = (ROOT / "search_spaces/default.toml").read_text()


def _space(pattern: str, replacement: str) -> str:
    text, n = re.subn(pattern, replacement, SPACE, count=1, flags=re.M)
    assert n == 1, pattern
    return text


SPACE_CASES = {
    "max-stages-zero": (_space(r"^max_stages = 128", "max_stages = 0"), "space.max_stages: must be at least 1"),
    "max-stages-string": (_space(r"^max_stages = 128", 'max_stages = "4"'), "space.pipeline.max_stages"),
    "max-stages-float": (_space(r"^max_stages = 128", "max_stages = 4.5"), "space.pipeline.max_stages"),
    "max-stages-huge": (_space(r"^max_stages = 128", "max_stages = 1000000000"), "space.max_stages"),
    "uniform-no": (_space(r"^uniform_stages = false", 'uniform_stages = "no"'),
                   "space.pipeline.uniform_stages: must be true or false"),
    "uniform-zero": (_space(r"^uniform_stages = false", "uniform_stages = 0"), "space.pipeline.uniform_stages"),
    "overlap-string": (_space(r"^overlap_tp_comm = false", 'overlap_tp_comm = "false"'), "space.global.overlap_tp_comm"),
    "tp-string": (_space(r"^tp = \[.*\]", 'tp = "8"'), "space.stage.tp: must be a list"),
    "tp-strings": (_space(r"^tp = \[.*\]", 'tp = ["8"]'), "space.stage.tp[0]"),
    "tp-float": (_space(r"^tp = \[.*\]", "tp = [1.5]"), "space.stage.tp[0]"),
    "tp-huge": (_space(r"^tp = \[.*\]", "tp = [1, 100000000]"), "space.tp"),
    "zero-strings": (_space(r"^zero = \[.*\]", 'zero = ["1"]'), "space.stage.zero[0]"),
    "micro-batch-negative": (_space(r"^micro_batch = \[.*\]", "micro_batch = [-1]"), "space.micro_batch"),
    "micro-batch-empty": (_space(r"^micro_batch = \[.*\]", "micro_batch = []"), "space.micro_batch"),
    "n-trials-inf": (_space(r"^n_trials = 24", "n_trials = inf"), "space.optuna.n_trials: must be a finite number"),
    "n-trials-huge": (_space(r"^n_trials = 24", "n_trials = 1000000000"), "space.n_trials: must be between 1 and"),
    "grid-nan": (_space(r"^grid_max = 96", "grid_max = nan"), "space.optuna.grid_max"),
    "sampler-number": (_space(r'^sampler = "tpe"', "sampler = 3"), "space.optuna.sampler"),
    "kv-cache-number": (_space(r"^kv_cache = \[.*\]", "kv_cache = [1]"), "space.inference.kv_cache[0]"),
    "typo-key": (_space(r"^max_stages = 128", "max_stages = 128\nmax_stage = 4"),
                 "space.pipeline.max_stage: is not a key here (did you mean max_stages"),
    "stage-not-table": (_space(r"^\[stage\]", "stage = 5\n[stage_options]"), "space.stage"),
    "missing-tp": (_space(r"^tp = \[.*\]", ""), "space.stage.tp: is missing"),
    "name-number": (_space(r'^name = "default"', "name = 5"), "space.name"),
}


@pytest.mark.parametrize("name", sorted(SPACE_CASES))
def test_bad_space_is_one_line(capsys, tmp_path, monkeypatch, name):
    text, field = SPACE_CASES[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["search", "--model", "small", "--gpus", "8", "--space", str(path), "--runs-dir", "runs"],
            field)


def test_every_shipped_space_reads_and_keeps_its_types():
    from autotune.search.space import load_space, space_names

    for name in space_names():
        space = load_space(name)
        if space.kind == "parallel":
            assert isinstance(space.uniform_stages, bool) and space.max_stages >= 1


# ---- clusters and profiles -------------------------------------------------------------------

DGX = tomllib.loads((ROOT / "autotune/data/clusters.toml").read_text())["dgx-h100"]
PROFILE = json.loads((ROOT / "autotune/data/devices/h100-sxm-measured.json").read_text())


def _edit(data: dict, path: tuple, value) -> dict:
    out = json.loads(json.dumps(data))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


CLUSTER_CASES = {
    "five": ("5", "must hold a table of cluster keys, got 5"),
    "null": ("null", "must hold a table of cluster keys, got None"),
    "list": ("[1, 2]", "must hold a table"),
    "empty": ("{}", "cluster.device"),
    "device-number": (json.dumps({**DGX, "device": 5}), "cluster.device"),
    "gpus-per-node-string": (json.dumps({**DGX, "gpus_per_node": "8"}), "cluster.gpus_per_node"),
    "gpus-per-node-float": (json.dumps({**DGX, "gpus_per_node": 8.0}), "cluster.gpus_per_node"),
    "intra-node-number": (json.dumps({**DGX, "intra_node": 5}), "cluster.intra_node: must be a table"),
    "bandwidth-string": (json.dumps(_edit(DGX, ("intra_node", "bandwidth"), "fast")), "intra_node.bandwidth"),
    "bandwidth-infinity": (json.dumps(_edit(DGX, ("intra_node", "bandwidth"), "@@")).replace('"@@"', "Infinity"),
                           "intra_node.bandwidth: must be a finite number"),
    "bandwidth-tiny": (json.dumps(_edit(DGX, ("intra_node", "bandwidth"), 1e-300)), "intra_node.bandwidth: 1e-300 is outside"),
    "latency-negative": (json.dumps(_edit(DGX, ("host_link", "latency_s"), -1)), "host_link.latency_s"),
    "collectives-number": (json.dumps(_edit(DGX, ("intra_node", "collectives"), 5)), "intra_node.collectives"),
    "cores-string": (json.dumps({**DGX, "cores_per_node": "x"}), "cluster.cores_per_node"),
    "slices-string": (json.dumps({**DGX, "node_slices": "x"}), "cluster.node_slices"),
    "max-nodes-zero": (json.dumps({**DGX, "max_nodes": 0}), "cluster.max_nodes"),
    "tiers-number": (json.dumps({**DGX, "tiers": 5}), "cluster.tiers"),
    "tiers-of-numbers": (json.dumps({**DGX, "tiers": [5]}), "cluster.tiers[0]"),
    "source-number": (json.dumps({**DGX, "source": 5}), "cluster.source"),
    "nested": ('{"a":' * 5000 + "1" + "}" * 5000, "nested too deeply"),
}


@pytest.mark.parametrize("name", sorted(CLUSTER_CASES))
def test_bad_cluster_file_is_one_line(capsys, tmp_path, monkeypatch, name):
    text, field = CLUSTER_CASES[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", "small", "--gpus", "8", "--cluster", str(path)], field)


def test_toml_infinity_in_a_cluster_file_is_refused(capsys, tmp_path, monkeypatch):
    path = tmp_path / "c.toml"
    path.write_text('device = "h100"\ngpus_per_node = 8\n[intra_node]\nlatency_s = 1e-6\nstep_latency_s = 1e-7\n'
                    "bandwidth = inf\n[host_link]\nlatency_s = 1e-6\nstep_latency_s = 0\nbandwidth = 5e10\n")
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", "small", "--gpus", "8", "--cluster", str(path)],
            "cluster.intra_node.bandwidth: must be a finite number")


PROFILE_CASES = {
    "peak-flops-lots": (("device", "peak_flops"), "lots", "profile.device.peak_flops: "),
    "peak-bf16-lots": (("device", "peak_flops", "bf16"), "lots", "profile.device.peak_flops.bf16"),
    "peak-absurd": (("device", "peak_flops", "bf16"), 1e30, "1e+30 is outside"),
    "tiers-string": (("device", "tiers"), "x", "profile.device.tiers"),
    "regressions-number": (("device", "regressions"), 5, "profile.device.regressions"),
    "gemm-number": (("device", "regressions", "gemm"), 5, "profile.device.regressions.gemm"),
    "memory-latency-string": (("device", "regressions", "memory", "latency_s"), "x",
                              "profile.device.regressions.memory.latency_s"),
    "r2-string": (("device", "regressions", "memory", "r2"), "x", "profile.device.regressions.memory.r2"),
    "efficiency-string": (("device", "kernel_efficiency"), "x", "profile.device.kernel_efficiency"),
    "aliases-number": (("device", "aliases"), 5, "profile.device.aliases"),
    "name-number": (("device", "name"), 5, "profile.device.name"),
    "device-null": (("device",), None, "not an autotune profile"),
    "links-number": (("links",), 5, "profile.links"),
}


@pytest.mark.parametrize("name", sorted(PROFILE_CASES))
def test_bad_profile_is_one_line(capsys, tmp_path, monkeypatch, name):
    path, value, field = PROFILE_CASES[name]
    file = tmp_path / f"{name}.json"
    file.write_text(json.dumps(_edit(PROFILE, path, value)))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["evaluate", "--model", "small", "--gpus", "8", "--profile", str(file)], field)
    refused(capsys, tmp_path, ["profile", "--show", str(file)], field)


def test_shipped_hardware_still_reads():
    from autotune.spec.hardware_data import cluster_names, device_names, load_cluster, load_device, load_profile

    for name in cluster_names():
        load_cluster(name)
    for name in device_names():
        load_device(name)
    for name in ("cpu", "h100-sxm-measured"):
        load_profile(ROOT / f"autotune/data/devices/{name}.json")


LONG = "x" * 300  # one name of 300 bytes: file systems take at most 255 (NAME_MAX)


@pytest.mark.parametrize("argv, field", [
    (["search", "--model", "small", "--gpus", "8", "--runs-dir", LONG], "runs_dir"),
    (["search", "--model", "small", "--gpus", "8", "--runs-dir", f"runs/{LONG}/deeper"], "runs_dir"),
    (["curve", "--model", "small", "--gpus", "1,2", "--runs-dir", LONG], "runs_dir"),
    (["profile", "--quick", "--out", f"{LONG}.json"], "out"),
    (["scenario", "seed-experiment", "--out", f"{LONG}.md"], "out"),
], ids=["search-runs-dir", "search-runs-dir-nested", "curve-runs-dir", "profile-out", "scenario-out"])
def test_output_names_longer_than_the_file_system_takes_are_refused_first(capsys, tmp_path, monkeypatch, argv, field):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, tmp_path, argv, field)
    assert "a name of 30" in err and "at most 255 bytes" in err


def test_library_run_dir_with_a_long_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import autotune

    with pytest.raises(AutotuneError, match="run_dir"):
        autotune.search("small", 8, run_dir=tmp_path / LONG)
    assert list(tmp_path.iterdir()) == []


CPU_PROFILE = json.loads((ROOT / "autotune/data/devices/cpu.json").read_text())
# what profile --refit reads back (the measurements, the host) and profile --show prints (fits, mesh):
# typed on every read (evaluate --profile too: a search copies them into its run); the groups a
# refit can fit are checked by the refit alone (True)
KEPT_CASES = {
    "measurement-amount-lots": (("measurements", 0, "amount"), "lots", "profile.measurements[0].amount", False),
    "measurement-amount-negative": (("measurements", 0, "amount"), -1.0, "must be >= 0, got -1.0",
                                    False),
    "measurement-median-null": (("measurements", 0, "median_s"), None, "profile.measurements[0].median_s",
                                False),
    "measurement-group-number": (("measurements", 0, "group"), 5, "profile.measurements[0].group", False),
    "measurement-group-unknown": (("measurements", 0, "group"), "gemm/x/y", "is not a measured group", True),
    "collective-ranks-word": (("measurements", -1, "group"), "all_reduce/two", "is not a measured group", True),
    "measurement-not-object": (("measurements", 0), 5, "profile.measurements[0]", False),
    "measurement-unknown-key": (("measurements", 0, "bogus"), 1, "profile.measurements[0].bogus", False),
    "measurements-string": (("measurements",), "x", "profile.measurements", False),
    "repeats-string": (("measurements", 0, "num_repeats"), "x", "profile.measurements[0].num_repeats", False),
    "host-threads-string": (("host", "threads_per_process"), "x", "profile.host.threads_per_process", False),
    "host-number": (("host",), 5, "profile.host", False),
    "host-load-string": (("host", "load_average"), "x", "profile.host.load_average", False),
    "host-quick-string": (("host", "quick"), "x", "profile.host.quick", False),
    "mesh-string": (("mesh",), "x", "profile.mesh", False),
    "mesh-level-size-string": (("mesh", "levels", 0, "size"), "x", "profile.mesh.levels[0].size", False),
    "failures-number": (("failures",), 5, "profile.failures", False),
    "fits-string": (("fits",), "x", "profile.fits", False),
    "fit-r2-string": (("fits", "memory", "r2"), "x", "profile.fits.memory.r2", False),
    "fit-point-label-number": (("fits", "memory", "points", 0, "label"), 5, "profile.fits.memory.points[0].label", False),
}


@pytest.mark.parametrize("name", sorted(KEPT_CASES))
def test_bad_profile_measurements_and_report_are_one_line(capsys, tmp_path, monkeypatch, name):
    path, value, field, refit_only = KEPT_CASES[name]
    file = tmp_path / "p.json"
    file.write_text(json.dumps(_edit(CPU_PROFILE, path, value)))
    monkeypatch.chdir(tmp_path)
    refused(capsys, tmp_path, ["profile", "--refit", str(file), "--out", "out.json"], field)
    if not refit_only:
        refused(capsys, tmp_path, ["profile", "--show", str(file)], field)
        refused(capsys, tmp_path, ["evaluate", "--model", "small", "--gpus", "8", "--profile", str(file)], field)


CXL = (ROOT / "search_spaces/cxl-lora.toml").read_text()


@pytest.mark.parametrize("change, sets, field", [
    (("d = 512", 'd = "512"'), [], "space.d: must be a whole number"),
    (("d = 512", "d = 512.7"), [], "space.d: must be a whole number"),
    (("latency_s = 1.0e-6", "latency_s = inf"), [], "space.parameters.latency_s: must be a finite number"),
    (None, ["d=1e300"], "d='1e300' is not a whole number"),
    (None, ["latency_s=inf"], "--set latency_s: must be a finite number"),
    (None, ["n_trials=1000000000"], "n_trials: must be at most 10,000"),
    (None, ["b_max=1000000000000000", "step=1", "--method", "exhaustive"], "step: the grid has"),
], ids=["d-string", "d-fraction", "latency-inf", "set-d-huge", "set-latency-inf", "set-trials", "grid-1e15"])
def test_standalone_space_values_are_typed(capsys, tmp_path, monkeypatch, change, sets, field):
    """A cxl-lora space's values are read as the TOML has them (never coerced), --set values
    finite and whole where the problem takes integers, and the exhaustive grid sized before it is
    built (a grid of 1e15 points would not fit in memory)."""
    path = tmp_path / "cxl.toml"
    assert change is None or change[0] in CXL
    path.write_text(CXL.replace(*change) if change else CXL)
    monkeypatch.chdir(tmp_path)
    argv = ["search", "--space", str(path), "--runs-dir", "runs"]
    for item in sets:
        argv += [item] if item.startswith("--") or item == "exhaustive" else ["--set", item]
    refused(capsys, tmp_path, argv, field)
