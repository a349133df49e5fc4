"""Baselines scored beside every search: pure data parallel or ZeRO-3, the Megatron rule of
thumb, and the seed experiment's TP=8 x PP=2."""

from __future__ import annotations

from collections.abc import Iterator

from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan
from autotune.search.result import Baseline
from autotune.spec.workload import is_training

__all__ = ["baselines"]

_RECOMPUTE_ORDER = ("none", "selective", "full")


def _training(problem) -> bool:
    return is_training(problem.workload)


def _score(problem, **degrees) -> tuple[Plan, Estimate] | None:
    """A uniform plan scored; inference plans drop the training-only choices (ZeRO, recomputation,
    sequence parallelism)."""
    m, w = problem.model, problem.workload
    training = _training(problem)
    if not training:
        degrees = {**degrees, "zero": 0, "recompute": "none"}
    try:
        plan = uniform_plan(num_layers=m.num_layers, gpus=problem.gpus, global_batch=w.global_batch,
                            has_embeddings=m.has_embeddings, sequence_parallel=training and degrees.get("tp", 1) > 1,
                            **degrees)
        return plan, evaluate_plan(m, w, problem.cluster, plan, runtime=problem.runtime)
    except AutotuneError:
        return None


def _first_fitting(candidates: Iterator[tuple[Plan, Estimate] | None]) -> tuple[Plan | None, Estimate | None]:
    """The fastest that fits; if none fits, the one needing the least memory."""
    scored = [c for c in candidates if c is not None]
    fitting = [c for c in scored if c[1].fits]
    if fitting:
        return min(fitting, key=lambda c: c[1].step_time_s)
    if scored:
        return min(scored, key=lambda c: c[1].peak_memory_bytes_per_gpu)
    return None, None


def _best_inference(problem, **degrees: int) -> tuple[Plan | None, Estimate | None]:
    """Inference: the best micro-batch and KV placement (with the least KV share off HBM that
    fits) for pinned degrees, as the seed scenario scores its named plans."""
    from autotune.search.serving import best_plan, score_plans, uniform_inference_plans

    scored = score_plans(problem.model, problem.workload, problem.cluster,
                         uniform_inference_plans(problem.model, problem.workload, problem.gpus, **degrees),
                         runtime=problem.runtime)
    best = best_plan(scored) or (min(scored, key=lambda s: s.estimate.peak_memory_bytes_per_gpu) if scored else None)
    return (best.plan, best.estimate) if best else (None, None)


def _micro_batches(problem, dp: int) -> list[int]:
    """The space's micro-batch sizes that divide a replica's share of the global batch."""
    batch = problem.workload.global_batch
    per_replica = batch // dp if dp and batch % dp == 0 else 0
    return [b for b in problem.space.micro_batch if per_replica and per_replica % b == 0]


def _tuned(problem, *, tp: int, pp: int, zeros: tuple[int, ...] = (1,)) -> tuple[Plan | None, Estimate | None]:
    """Pinned degrees with the micro-batch, recomputation and ZeRO stage a person would tune
    before comparing (the search gets them too, so a baseline gets them as well)."""
    dp = problem.gpus // (tp * pp) if problem.gpus % (tp * pp) == 0 else 0
    return _first_fitting(_recomputing_less_first(problem, tp, pp, zeros, _micro_batches(problem, dp)))


def _recomputing_less_first(problem, tp: int, pp: int, zeros: tuple[int, ...], sizes: list[int]):
    """The scored plans of every ZeRO stage, recomputation and micro-batch size, in that order,
    less those where the same plan recomputing less fits already: recomputation only adds work
    to a step (the same kernels and collectives, and a forward again: tests/test_search_baselines.py
    checks the step times against scoring every plan), so such a plan is no faster than one
    _first_fitting has already met, and a fitting plan leaves the least-memory fallback unread.
    In the warm loop of `large` over GPU counts this scores a third of the Megatron rule's plans."""
    for z in zeros:
        fitting: set[int] = set()  # micro-batch sizes where a plan recomputing less fits
        for r in _RECOMPUTE_ORDER:
            for b in sizes:
                if b in fitting:
                    continue
                scored = _score(problem, tp=tp, pp=pp, zero=z, recompute=r, micro_batch=b)
                if scored is not None and scored[1].fits:
                    fitting.add(b)
                yield scored


def _data_parallel(problem) -> Baseline:
    per_replica = problem.workload.global_batch // problem.gpus if problem.workload.global_batch % problem.gpus == 0 else 0
    if not _training(problem):
        plan, est = _best_inference(problem, tp=1, pp=1) if per_replica else (None, None)
    else:
        plan, est = _tuned(problem, tp=1, pp=1, zeros=(0, 1, 3))
    note = "" if per_replica else f"the global batch does not divide among {problem.gpus} replicas"
    description = ("pure data parallel (DDP, ZeRO-1) or ZeRO-3/FSDP, best micro-batch and recomputation" if _training(problem)
                   else "one model replica per GPU, best micro-batch and KV-cache placement")
    return Baseline(name="data-parallel", description=description, plan=plan, estimate=est, note=note)


def _megatron_tp(problem) -> int:
    m = problem.model
    tp = min(problem.cluster.gpus_per_node, problem.gpus)
    while tp > 1 and ((m.has_attention and (m.num_heads % tp or m.num_kv_heads % tp)) or m.ffn_hidden_size % tp):
        tp //= 2
    return tp


def _tp_words(tp: int) -> str:
    return f"TP={tp} (GPUs per node, halved until it divides the heads)"


def _megatron(problem) -> Baseline:
    """TP = GPUs per node, the smallest PP that fits, DP the rest (Narayanan et al. SC'21 sec. 3.3
    takeaways: TP inside a node, PP across nodes to fit, DP for the rest)."""
    tp = _megatron_tp(problem)
    last = None
    for pp in range(1, problem.model.num_layers + 1):
        if problem.gpus % (tp * pp):
            continue
        if not _training(problem):
            plan, est = _best_inference(problem, tp=tp, pp=pp)
            scored = (plan, est) if plan is not None else None
            if scored and est.fits:
                return Baseline(name="megatron-rule", description=f"{_tp_words(tp)}, smallest PP that fits (PP={pp}), DP the rest",
                                plan=plan, estimate=est)
            last = scored or last
            continue
        plan, est = _tuned(problem, tp=tp, pp=pp)
        if est is not None and est.fits:
            return Baseline(name="megatron-rule", description=f"{_tp_words(tp)}, smallest PP that fits (PP={pp}), DP the rest, "
                            "best micro-batch and recomputation", plan=plan, estimate=est)
        last = (plan, est) if plan is not None else last
    return Baseline(name="megatron-rule", description=f"{_tp_words(tp)}, smallest PP that fits, DP the rest",
                    plan=last[0] if last else None, estimate=last[1] if last else None,
                    note="no pipeline depth fits")


def _seed_tp8_pp2(problem) -> Baseline | None:
    if problem.gpus != 16:
        return None
    if _training(problem):
        plan, est = _tuned(problem, tp=8, pp=2)
    else:
        plan, est = _best_inference(problem, tp=8, pp=2)
    if plan is None:
        return None
    return Baseline(name="seed-tp8-pp2", description="the seed experiment's baseline: TP=8 x PP=2 on 16 GPUs",
                    plan=plan, estimate=est)


def _layer_wise(problem) -> Baseline | None:
    """Seed 004's proposal for inference: one layer (group) per GPU, PP = layers."""
    if _training(problem) or problem.gpus != problem.model.num_layers:
        return None
    plan, est = _best_inference(problem, tp=1, pp=problem.gpus)
    if plan is None:
        return None
    return Baseline(name="layer-wise", description=f"the seed experiment's layer-wise plan: PP={problem.gpus}, one layer per GPU",
                    plan=plan, estimate=est)


def baselines(problem) -> tuple[Baseline, ...]:
    out = [_data_parallel(problem), _megatron(problem), _seed_tp8_pp2(problem), _layer_wise(problem)]
    return tuple(b for b in out if b is not None)
