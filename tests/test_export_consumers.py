"""Exports loaded by the frameworks themselves, as installed (the ``exports`` dependency group,
which CI installs): DeepSpeed's ``DeepSpeedConfig`` given the data-parallel size, torchtitan 0.3's
own ``ConfigManager`` (with its mesh check ``ParallelDims`` and the module names of the model it
builds), and Megatron-Core's config dataclasses (``TransformerConfig``, the DDP and optimizer
configs, ``GPTModel``'s arguments) for the flags that map to them.

Nothing here is a snapshot of a framework's options: a renamed or removed option in a new
release fails these tests. Without the frameworks installed the tests skip, except under
``CI=true``, where they fail (.ci/run installs them). torchtitan 0.2.x (TOML) cannot be installed
next to 0.3; its files are checked against its job-config keys in tests/test_export.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import warnings
from dataclasses import replace

import pytest

from autotune.errors import AutotuneError
from autotune.outputs.export import export
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile
from autotune.spec.presets import load_preset
from autotune.spec.resolve import training_workload


def _framework(module: str):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except ImportError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is not installed under CI (pip install -e '.[exports]'): {err}")
        pytest.skip(f"{module} not installed (pip install -c constraints -e '.[exports]')")


def _plan(model: str = "llama3-8b", counts: list[int] | None = None, global_batch: int | None = None,
          **degrees) -> PlanFile:
    spec = load_preset(model)
    work = training_workload(spec, global_batch=global_batch)
    plan = uniform_plan(num_layers=spec.num_layers, global_batch=work.global_batch, has_embeddings=spec.has_embeddings,
                        **degrees)
    if counts:
        starts = [sum(counts[:i]) for i in range(len(counts))]
        plan = plan.with_changes(stages=tuple(replace(s, layers=(a, a + n))
                                              for s, a, n in zip(plan.stages, starts, counts)))
    return PlanFile(plan=plan, model=spec, workload=work, cluster="dgx-h100")


HOST = dict(weights_in="host", optimizer_in="host", gradients_in="host")
PLANS = {
    "dp8-zero0": _plan(gpus=8),
    "dp8-zero1": _plan(gpus=8, zero=1),
    "dp8-zero2": _plan(gpus=8, zero=2),
    "dp8-zero3": _plan(gpus=8, zero=3),
    "dp8-zero3-offload": _plan(gpus=8, zero=3, **HOST),
    "dp8-zero1-optimizer-offload": _plan(gpus=8, zero=1, optimizer_in="host"),
    "tp2-dp4-zero3": _plan(gpus=8, tp=2, zero=3),
    "tp2-dp4-zero1-full": _plan(gpus=8, tp=2, zero=1, recompute="full"),
    "tp4-sp-pp2-zero1-selective": _plan(gpus=16, tp=4, pp=2, zero=1, sequence_parallel=True, recompute="selective"),
    "tp2-sp-pp4-vpp2-zero3-interleaved": _plan(gpus=16, tp=2, pp=4, vpp=2, zero=3, sequence_parallel=True),
    "tp8-pp4-uneven-zero3": _plan(gpus=32, tp=8, pp=4, zero=3, sequence_parallel=True, counts=[7, 9, 9, 7]),
    "tp4-pp4-vpp2-uneven-layout": _plan(gpus=32, tp=4, pp=4, vpp=2, zero=2, sequence_parallel=True,
                                        counts=[6, 10, 8, 8]),
    "tp4-sp-cp2-zero3-full": _plan(gpus=16, tp=4, cp=2, zero=3, sequence_parallel=True, recompute="full"),
    "cp4-dp2-zero2": _plan(gpus=8, cp=4, zero=2),
    "tp2-sp-dp4-zero2-async-tp": _plan(gpus=8, tp=2, zero=2, sequence_parallel=True, overlap_tp_comm=True),
    "hsdp-dp8-shard4-zero3": _plan(gpus=8, zero=3, dp_shard=4, reshard_after_forward=False),
    "gpipe-pp2-zero1": _plan(gpus=16, tp=4, pp=2, zero=1, sequence_parallel=True, schedule="gpipe"),
    "llama3-70b-tp8-pp4-zero1": _plan("llama3-70b", gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True,
                                      recompute="selective"),
    # mixtures of experts (expert parallelism folded into dp, as Megatron-Core lays it out)
    "mixtral-8x7b-tp2-sp-pp2-ep8": _plan("mixtral-8x7b", gpus=64, tp=2, pp=2, zero=1, sequence_parallel=True, ep=8,
                                         recompute="full"),
    "qwen3-30b-a3b-pp2-ep8": _plan("qwen3-30b-a3b", gpus=16, pp=2, zero=1, ep=8),
    "deepseek-v3-pp16-ep16-mla": _plan("deepseek-v3", gpus=256, pp=16, zero=1, ep=16, recompute="full"),
    # torchtitan's FSDP2 expert parallelism (ep borrows dp_shard x tp ranks)
    "qwen3-30b-a3b-ep8-zero3": _plan("qwen3-30b-a3b", gpus=16, zero=3, ep=8),
    "qwen3-30b-a3b-tp2-sp-pp2-ep16-zero3": _plan("qwen3-30b-a3b", gpus=32, tp=2, pp=2, zero=3, sequence_parallel=True,
                                                 ep=16),
    "deepseek-v3-pp8-ep32-zero3": _plan("deepseek-v3", gpus=256, pp=8, zero=3, ep=32, recompute="full"),
}


def _exports(fmt: str) -> dict[str, tuple[PlanFile, str]]:
    """Every plan the format can express, with its text (the others are refused with a reason)."""
    out = {}
    for name, pf in PLANS.items():
        try:
            out[name] = (pf, export(pf, fmt).text)
        except AutotuneError as err:
            assert "cannot express" in err.message, err
    return out


# DeepSpeed ------------------------------------------------------------------------------------

class _Recorded(dict):
    """A config dict that remembers which keys DeepSpeed read."""

    read: set

    def _mark(self, key):
        self.read.add(key)
        return key

    def __getitem__(self, key):
        return super().__getitem__(self._mark(key))

    def get(self, key, default=None):
        return super().get(self._mark(key), default)

    def __contains__(self, key):
        return super().__contains__(self._mark(key))


def _recorded(table: dict, read: set) -> _Recorded:
    out = _Recorded({k: _recorded(v, read) if isinstance(v, dict) and k != "_autotune" else v for k, v in table.items()})
    out.read = read
    return out


class _DataParallel:
    """The ``mpu`` DeepSpeedConfig asks for the data-parallel size (else it assumes one GPU)."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.fixture(scope="module")
def deepspeed_config(monkeypatch_module):
    _framework("deepspeed")
    config_module = _framework("deepspeed.runtime.config")
    # DeepSpeedConfig asks the rank before the mpu; without a process group it falls back to one
    # GPU. Rank 0 of a group is what the launching process reports; nothing else is replaced.
    monkeypatch_module.setattr(config_module.dist, "get_rank", lambda group=None: 0)
    return config_module.DeepSpeedConfig


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


DEEPSPEED = _exports("deepspeed")


def test_deepspeed_loads_at_least_eight_exports():
    assert len(DEEPSPEED) >= 8, sorted(DEEPSPEED)


@pytest.mark.parametrize("name", sorted(DEEPSPEED))
def test_deepspeed_config_loads_each_export(deepspeed_config, name):
    pf, text = DEEPSPEED[name]
    table, read = json.loads(text), set()
    config = deepspeed_config(_recorded(table, read), mpu=_DataParallel(pf.plan.dp))
    s = pf.plan.stages[0]
    assert config.world_size == pf.plan.dp
    assert config.train_batch_size == pf.workload.global_batch
    assert config.train_micro_batch_size_per_gpu == pf.plan.micro_batch
    assert config.gradient_accumulation_steps == pf.plan.num_microbatches
    assert config.zero_optimization_stage == s.zero and config.bfloat16_config.enabled
    assert (config.zero_config.offload_param is not None) == (s.weights_in == "host")
    assert (config.zero_config.offload_optimizer is not None) == (s.optimizer_in == "host")
    assert config.tensor_parallel_config.autotp_size == (s.tp if s.tp > 1 else 0)
    assert (config.activation_checkpointing_config.number_checkpoints is not None) == (s.recompute == "full")
    unread = {k for k in table if k not in read}  # nested tables are pydantic models that forbid unknown keys
    assert unread == {"_autotune"}, f"keys DeepSpeed does not read: {unread}"


def test_deepspeed_rejects_what_the_export_must_not_write(deepspeed_config):
    """The check above can fail: an unknown ZeRO key and a wrong batch are refused."""
    pf, text = DEEPSPEED["dp8-zero3"]
    table = json.loads(text)
    with pytest.raises(Exception, match="extra"):
        deepspeed_config({**table, "zero_optimization": {"stage": 3, "not_a_key": 1}}, mpu=_DataParallel(8))
    with pytest.raises(AssertionError):
        deepspeed_config(table, mpu=_DataParallel(4))


# torchtitan 0.3 ---------------------------------------------------------------------------------

TORCHTITAN = _exports("torchtitan")


@pytest.fixture(scope="module")
def torchtitan():
    manager = _framework("torchtitan.config.manager")
    parallel_dims = _framework("torchtitan.distributed.parallel_dims")
    return manager.ConfigManager, parallel_dims.ParallelDims


def _arguments(text: str) -> list[str]:
    return [word for line in text.splitlines() if line and not line.startswith("#") for word in line.split()]


def test_torchtitan_loads_at_least_eight_exports():
    assert len(TORCHTITAN) >= 8, sorted(TORCHTITAN)


@pytest.mark.parametrize("name", sorted(TORCHTITAN))
def test_torchtitan_config_manager_loads_each_export(torchtitan, name):
    manager, parallel_dims = torchtitan
    pf, text = TORCHTITAN[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = manager().parse_args(_arguments(text))
    plan, s = pf.plan, pf.plan.stages[0]
    dims = parallel_dims.from_config(config.parallelism, world_size=plan.gpus)  # its mesh check
    assert (dims.tp, dims.cp, dims.pp, dims.dp_shard * dims.dp_replicate) == (s.tp, s.cp, plan.pp, s.dp)
    assert dims.ep == s.ep and (dims.dp_shard * dims.cp * dims.tp) % dims.ep == 0  # efsdp x ep covers the dense region
    train = config.training
    assert train.global_batch_size == plan.global_batch and train.seq_len == pf.workload.seq_len
    assert train.global_batch_size % (train.local_batch_size * s.dp) == 0
    assert train.local_batch_size % config.parallelism.pipeline_parallel_microbatch_size == 0
    recompute = {"none": type(None), "full": "FullAC", "selective": "SelectiveAC"}[s.recompute]
    checkpoint = config.activation_checkpoint
    assert checkpoint is None if recompute is type(None) else type(checkpoint).__qualname__.startswith(recompute)
    assert config.parallelism.enable_sequence_parallel == (s.sequence_parallel and s.tp > 1)
    keep = s.zero == 2 or not s.reshard_after_forward
    assert (config.parallelism.fsdp_reshard_after_forward == "never") == (keep and s.zero >= 2 and s.dp * s.cp > 1)
    assert dims.dp_shard == (s.shard_degree if s.zero >= 2 else 1)


@pytest.fixture(scope="module")
def torchtitan_llama3_8b(torchtitan):
    import torch

    manager, _ = torchtitan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = manager().parse_args(["--module", "llama3", "--config", "llama3_8b"])
    with torch.device("meta"):
        return config.model_spec.model.build()


def test_torchtitan_builds_the_same_model_with_the_named_modules(torchtitan_llama3_8b):
    """The pipeline parts name modules of the model torchtitan builds; its parameter count is the
    one autotune's graph counts for the preset."""
    from autotune.graph.table import model_tables

    model = torchtitan_llama3_8b
    names = {n for n, _ in model.named_modules()}
    for _, text in (TORCHTITAN[n] for n in TORCHTITAN if PLANS[n].model.name == "llama3-8b"):
        for line in text.splitlines():
            if line.startswith("--parallelism.module-fqns-per-model-part"):
                parts = [p.split(",") for p in line.split()[1:]]
                assert {m for p in parts for m in p} <= names
                assert sum(len(p) for p in parts) == 32 + 3  # every layer, embedding, norm and head once
    params = sum(p.numel() for p in model.parameters())
    spec = load_preset("llama3-8b")
    ours = model_tables(spec, 4096, 2, "flash").num_params
    assert abs(ours - params) / params < 0.001, (ours, params)


def _torchtitan_model(config):
    import torch

    with torch.device("meta"):
        return config.model_spec.model.build()


_TITAN_ROUTERS = {"topk_softmax": ("softmax", True), "softmax_topk": ("softmax", False), "sigmoid_topk": ("sigmoid", True)}


@pytest.mark.parametrize("name", sorted(n for n in TORCHTITAN if PLANS[n].model.is_moe))
def test_torchtitan_builds_the_planned_mixture_of_experts(torchtitan, name):
    """The config function an MoE export names builds the spec's model: parameters within 0.5%,
    the same experts, top-k and router, and every module the pipeline parts name."""
    manager, _ = torchtitan
    pf, text = TORCHTITAN[name]
    m = pf.model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = manager().parse_args(_arguments(text))
    layers = config.model_spec.model.layers
    assert len(layers) == m.num_layers
    assert [getattr(layer, "moe", None) is not None for layer in layers] == [m.is_moe_layer(i) for i in range(m.num_layers)]
    moe = next(layer.moe for layer in layers if getattr(layer, "moe", None) is not None)
    router = moe.router
    assert (moe.num_experts, router.top_k) == (m.num_experts, m.num_experts_per_token)
    assert (router.score_func, router.route_norm) == _TITAN_ROUTERS[m.router]
    assert router.route_scale == m.router_scaling_factor
    assert (router.num_expert_groups or 0, router.num_limited_groups or 0) == (m.router_groups, m.router_group_topk)
    model = _torchtitan_model(config)
    params = sum(p.numel() for p in model.parameters())
    assert abs(m.num_parameters() - params) / params < 0.005, (m.num_parameters(), params)
    names = {n for n, _ in model.named_modules()}
    for line in text.splitlines():
        if line.startswith("--parallelism.module-fqns-per-model-part"):
            assert {mod for part in line.split()[1:] for mod in part.split(",")} <= names


def test_torchtitan_loads_moe_exports():
    assert sum(PLANS[n].model.is_moe for n in TORCHTITAN) >= 3, sorted(TORCHTITAN)


# Megatron-Core ------------------------------------------------------------------------------------

MEGATRON = _exports("megatron")
# Flags of Megatron-LM's training script that configure no Megatron-Core class (data, tokenizer,
# schedule, checkpoints); Megatron-Core's package has no argument parser to check them against
# (tests/test_export.py checks them against the snapshot of megatron/training/arguments.py).
TRAINING_ONLY = {"--micro-batch-size", "--global-batch-size", "--seq-length", "--mock-data", "--tokenizer-type",
                 "--train-iters", "--eval-iters", "--log-throughput", "--ckpt-format", "--group-query-attention",
                 "--make-vocab-size-divisible-by"}  # the script pads the vocabulary it gives GPTModel


def _flags(text: str) -> dict[str, str | None]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            flag, _, value = line.partition(" ")
            out[flag] = value or None
    return out


def _megatron_kwargs(flags: dict, num_layers: int) -> dict[str, dict]:
    """Each flag as the Megatron-Core field it sets (as megatron/training/arguments.py passes
    them on): {class: {field: value}}; a flag that maps to nothing fails the test."""
    import torch
    import torch.nn.functional as F

    out: dict[str, dict] = {"transformer": {}, "ddp": {}, "optimizer": {}, "gpt": {}}
    same = {"transformer": ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                            "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
                            "--num-query-groups", "--normalization", "--recompute-granularity", "--recompute-method",
                            "--recompute-num-layers", "--attention-dropout", "--hidden-dropout",
                            "--pipeline-model-parallel-layout", "--kv-channels",
                            "--num-moe-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                            "--expert-model-parallel-size", "--expert-tensor-parallel-size",
                            "--moe-router-topk-scaling-factor", "--moe-router-num-groups", "--moe-router-group-topk",
                            "--moe-router-enable-expert-bias", "--rope-type"),
            "ddp": ("--data-parallel-sharding-strategy", "--use-megatron-fsdp",
                    "--overlap-grad-reduce", "--overlap-param-gather"),
            "optimizer": ("--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer",
                          "--lr"),
            "gpt": ("--vocab-size", "--position-embedding-type", "--rotary-base", "--rotary-percent")}
    renamed = {"--decoder-first-pipeline-num-layers": ("transformer", "num_layers_in_first_pipeline_stage"),
               "--decoder-last-pipeline-num-layers": ("transformer", "num_layers_in_last_pipeline_stage"),
               "--num-virtual-stages-per-pipeline-rank": ("transformer", "virtual_pipeline_model_parallel_size"),
               "--microbatch-group-size-per-virtual-pipeline-stage": ("transformer", "microbatch_group_size_per_vp_stage"),
               "--sequence-parallel": ("transformer", "sequence_parallel"),
               "--tp-comm-overlap": ("transformer", "tp_comm_overlap"),
               "--add-qkv-bias": ("transformer", "add_qkv_bias"),
               "--qk-layernorm": ("transformer", "qk_layernorm"),
               "--ddp-bucket-size": ("ddp", "bucket_size"),
               "--num-experts": ("transformer", "num_moe_experts"),
               "--moe-router-score-function": ("transformer", "moe_router_score_function"),
               "--moe-router-load-balancing-type": ("transformer", "moe_router_load_balancing_type"),
               "--moe-token-dispatcher-type": ("transformer", "moe_token_dispatcher_type"),
               "--moe-router-pre-softmax": ("transformer", "moe_router_pre_softmax"),
               "--moe-grouped-gemm": ("transformer", "moe_grouped_gemm"),
               "--moe-shared-expert-intermediate-size": ("transformer", "moe_shared_expert_intermediate_size"),
               "--kv-lora-rank": ("transformer", "kv_lora_rank"), "--q-lora-rank": ("transformer", "q_lora_rank"),
               "--qk-head-dim": ("transformer", "qk_head_dim"), "--qk-pos-emb-head-dim": ("transformer", "qk_pos_emb_head_dim"),
               "--v-head-dim": ("transformer", "v_head_dim"),
               "--max-position-embeddings": ("gpt", "max_sequence_length"),
               "--rotary-seq-len-interpolation-factor": ("gpt", "seq_len_interpolation_factor"),
               "--use-rope-scaling": ("gpt", "rope_scaling"), "--rope-scaling-factor": ("gpt", "rope_scaling_factor")}
    # YaRN: MLATransformerConfig fields under latent attention; else the config attributes
    # argument_utils._apply_yarn_config_from_args sets (out["yarn"], set after construction)
    mla = "--multi-latent-attention" in flags
    out["yarn"] = {}
    yarn = {"--rotary-scaling-factor": "rotary_scaling_factor", "--mscale": "mscale", "--mscale-all-dim": "mscale_all_dim",
            "--yarn-original-max-position-embeddings": None, "--yarn-beta-fast": None, "--yarn-beta-slow": None}
    for flag, value in flags.items():
        parsed = True if value is None else _number(value)
        group = next((g for g, names in same.items() if flag in names), None)
        if group:
            out[group][flag[2:].replace("-", "_")] = parsed
        elif flag in renamed:
            out[renamed[flag][0]][renamed[flag][1]] = parsed
        elif flag in yarn:
            if mla and yarn[flag]:
                out["transformer"][yarn[flag]] = parsed
            else:
                out["yarn"]["yarn_" + (yarn[flag] or flag[len("--yarn-"):].replace("-", "_"))] = parsed
        elif flag == "--num-layers-per-virtual-pipeline-stage":
            pp = int(flags["--pipeline-model-parallel-size"])
            out["transformer"]["virtual_pipeline_model_parallel_size"] = num_layers // pp // int(value)
        elif flag == "--use-distributed-optimizer":  # arguments.py gives it to both configs
            out["ddp"]["use_distributed_optimizer"] = out["optimizer"]["use_distributed_optimizer"] = True
        elif flag == "--window-size":  # arguments.py tuple_type
            out["transformer"]["window_size"] = tuple(int(v) for v in value.strip("()").split(","))
        elif flag == "--moe-layer-freq":  # arguments.py moe_freq_type: an integer or a Python list expression
            out["transformer"]["moe_layer_freq"] = _number(value) if value.isdigit() else eval(value, {})  # noqa: S307
        elif flag == "--multi-latent-attention":  # arguments.py then builds MLATransformerConfig
            out["transformer_class"] = "mla"
        elif flag == "--window-attn-skip-freq":  # an integer or a 0/1 list
            out["transformer"]["window_attn_skip_freq"] = json.loads(value)
        elif flag == "--swiglu":
            out["transformer"].update(gated_linear_unit=True, activation_func=F.silu, bias_activation_fusion=False)
        elif flag == "--disable-bias-linear":
            out["transformer"]["add_bias_linear"] = False
        elif flag == "--untie-embeddings-and-output-weights":
            out["gpt"]["share_embeddings_and_output_weights"] = False
        elif flag == "--no-overlap-p2p-communication":
            out["transformer"]["overlap_p2p_comm"] = False
        elif flag in ("--bf16", "--fp16"):
            dtype = torch.bfloat16 if flag == "--bf16" else torch.float16
            out["transformer"].update({flag[2:]: True, "params_dtype": dtype, "pipeline_dtype": dtype})
        elif flag == "--attention-backend":
            from megatron.core.transformer.enums import AttnBackend

            out["transformer"]["attention_backend"] = AttnBackend[value]
        else:
            assert flag in TRAINING_ONLY, f"{flag} maps to no Megatron-Core field"
    return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@pytest.fixture(scope="module")
def megatron_core():
    _framework("megatron.core")
    transformer = _framework("megatron.core.transformer.transformer_config")
    ddp = _framework("megatron.core.distributed")
    optimizer = _framework("megatron.core.optimizer")
    gpt = _framework("megatron.core.models.gpt")
    return {"transformer": transformer.TransformerConfig, "mla": transformer.MLATransformerConfig,
            "ddp": ddp.DistributedDataParallelConfig,
            "optimizer": optimizer.OptimizerConfig, "gpt": gpt.GPTModel}


def test_megatron_core_loads_at_least_twelve_exports():
    assert len(MEGATRON) >= 12, sorted(MEGATRON)


@pytest.mark.parametrize("name", sorted(MEGATRON))
def test_megatron_core_configs_take_each_export(megatron_core, name):
    pf, text = MEGATRON[name]
    kwargs = _megatron_kwargs(_flags(text), pf.model.num_layers)
    gpt_args = set(inspect.signature(megatron_core["gpt"].__init__).parameters)
    assert set(kwargs["gpt"]) <= gpt_args, set(kwargs["gpt"]) - gpt_args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config_class = megatron_core["mla" if kwargs.pop("transformer_class", None) == "mla" else "transformer"]
        made = {"transformer": config_class(**kwargs["transformer"]), "ddp": megatron_core["ddp"](**kwargs["ddp"])}
        try:
            megatron_core["optimizer"](**kwargs["optimizer"])
        except TypeError:  # its precision-aware checks asserted; then it reads Transformer Engine's version
            assert kwargs["optimizer"].get("use_precision_aware_optimizer") and importlib.util.find_spec(
                "transformer_engine") is None
    config, plan, s = made["transformer"], pf.plan, pf.plan.stages[0]
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size) == \
        (s.tp, plan.pp, s.cp)
    if pf.model.is_moe:  # the experts Megatron-Core builds are the model's, laid out as planned
        m = pf.model
        assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size) == \
            (m.num_experts, m.num_experts_per_token, m.expert_ffn_hidden_size)
        assert (config.expert_model_parallel_size, config.expert_tensor_parallel_size) == (s.ep, s.etp)
        pattern = config.moe_layer_freq if isinstance(config.moe_layer_freq, list) else \
            [int(i % config.moe_layer_freq == 0) for i in range(m.num_layers)]
        assert pattern == [int(m.is_moe_layer(i)) for i in range(m.num_layers)]
        assert isinstance(config, megatron_core["mla"]) == m.is_mla
        assert config.moe_router_score_function == ("sigmoid" if m.router == "sigmoid_topk" else "softmax")
        assert config.moe_router_pre_softmax == (m.router == "softmax_topk")  # softmax_topk: not renormalised
        assert (config.moe_router_topk_scaling_factor or 1.0) == m.router_scaling_factor
        assert (config.moe_router_num_groups or 0, config.moe_router_group_topk or 0) == \
            (m.router_groups, m.router_group_topk)
        if m.is_mla:  # MLATransformerConfig defaults to YaRN: the export says which RoPE it is
            assert config.rope_type == ("yarn" if m.rope_scaling == "yarn" else "rope")
            assert m.rope_scaling == "none" or (config.rotary_scaling_factor, config.mscale, config.mscale_all_dim) == \
                (m.rope_scaling_factor, m.rope_mscale, m.rope_mscale_all_dim)
    assert (config.virtual_pipeline_model_parallel_size or 1) == plan.vpp
    assert config.num_layers == pf.model.num_layers and config.num_query_groups in (None, pf.model.num_kv_heads)
    assert config.recompute_granularity == (None if s.recompute == "none" else s.recompute)
    ddp = made["ddp"]
    assert ddp.use_distributed_optimizer == (s.zero == 1 and (s.dp * s.cp > 1 or s.optimizer_in == "host"))
    assert ddp.use_megatron_fsdp == (s.zero >= 2 and s.dp * s.cp > 1)
    if config.pipeline_model_parallel_layout is not None:  # Megatron-Core's own layout parser
        layout = config.pipeline_model_parallel_layout
        assert layout.pipeline_model_parallel_size == plan.pp


def test_megatron_core_field_names_are_checked():
    """A flag the exporter invented would map to no field and fail."""
    with pytest.raises(AssertionError, match="maps to no Megatron-Core field"):
        _megatron_kwargs({"--not-a-flag": "1"}, 32)


def test_counts_of_plans_loaded_by_each_consumer():
    counts = {fmt: len(v) for fmt, v in (("deepspeed", DEEPSPEED), ("torchtitan", TORCHTITAN), ("megatron", MEGATRON))}
    assert len(PLANS) >= 12 and counts["megatron"] >= 12 and min(counts.values()) >= 8, counts
    features = {"interleaved": lambda p: p.plan.vpp > 1, "uneven": lambda p: len({s.num_layers for s in p.plan.stages}) > 1,
                "cp": lambda p: p.plan.stages[0].cp > 1, "offload": lambda p: p.plan.stages[0].optimizer_in == "host"}
    for fmt, loaded in (("megatron", MEGATRON), ("torchtitan", TORCHTITAN)):
        for feature, has in features.items():
            assert any(has(pf) for pf, _ in loaded.values()), f"no {feature} plan loads in {fmt}"
    for zero in (1, 2, 3):
        assert any(pf.plan.stages[0].zero == zero for pf, _ in DEEPSPEED.values())



# Model flags: Megatron-Core builds the same attention as the spec -------------------------------

# Public config.json files (huggingface.co): Mistral-7B-v0.1 (sliding window 4096) and Qwen2-7B
# (QKV biases, RoPE base 1e6); keys as published.
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rope_theta": 10000.0, "sliding_window": 4096,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-05}
QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "hidden_act": "silu",
            "max_position_embeddings": 131072, "rope_theta": 1000000.0, "use_sliding_window": False,
            "sliding_window": 131072, "max_window_layers": 28, "tie_word_embeddings": False, "rms_norm_eps": 1e-06}


def _model(name: str):
    from autotune.spec.hf_config import model_from_hf_dict

    if name == "mistral-7b":
        return model_from_hf_dict(MISTRAL_7B, name=name)
    if name == "qwen2-7b":
        return model_from_hf_dict(QWEN2_7B, name=name)
    if name == "gemma2-like":  # windows on every other layer
        return load_preset("llama3-8b").with_changes(name=name, sliding_window=4096, sliding_window_every=2)
    if name == "gemma3-like":  # full attention on every 6th layer (1-based), windows on the others
        return load_preset("llama3-8b").with_changes(name=name, sliding_window=1024, full_attention_every=6)
    return load_preset(name)


MODELS = ["llama3-8b", "llama3-70b", "gpt3-175b", "mistral-7b", "qwen2-7b", "gemma2-like", "gemma3-like"]


@pytest.mark.parametrize("name", MODELS)
def test_megatron_core_builds_the_same_attention(megatron_core, name):
    from megatron.core.transformer.utils import is_layer_window_attention

    model = _model(name)
    work = training_workload(model, global_batch=64, seq_len=2048)
    plan = uniform_plan(num_layers=model.num_layers, gpus=16, tp=2, pp=2, global_batch=64, zero=1,
                        sequence_parallel=True)
    text = export(PlanFile(plan=plan, model=model, workload=work, cluster="dgx-h100"), "megatron").text
    flags = _flags(text)
    kwargs = _megatron_kwargs(flags, model.num_layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = megatron_core["transformer"](**kwargs["transformer"])
    qkv_bias = model.bias if model.qkv_bias is None else model.qkv_bias
    assert config.add_bias_linear == model.bias and (config.add_qkv_bias or config.add_bias_linear) == qkv_bias
    assert (config.num_query_groups or config.num_attention_heads) == model.num_kv_heads
    assert config.normalization == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model.norm]
    assert config.gated_linear_unit == (model.ffn_activation == "swiglu")
    windowed = [i for i in range(model.num_layers)
                if is_layer_window_attention(config.window_size, config.window_attn_skip_freq, i + 1)]
    assert windowed == [i for i in range(model.num_layers) if model.is_windowed_layer(i)]
    if model.sliding_window:
        assert config.window_size == (model.sliding_window - 1, 0)
    gpt = kwargs["gpt"]
    assert gpt["position_embedding_type"] == {"rotary": "rope", "learned": "learned_absolute"}[model.position_embedding]
    if model.position_embedding == "rotary":
        assert gpt["rotary_base"] == model.rope_theta
    assert gpt.get("share_embeddings_and_output_weights", True) == model.tied_embeddings
    divisor = int(flags["--make-vocab-size-divisible-by"])
    assert model.vocab_size % (divisor * 2) == 0 or divisor == 1
