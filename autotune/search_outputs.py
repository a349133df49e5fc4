"""Text and files a finished search produces (report.md; plots when matplotlib is present)."""

from __future__ import annotations

from autotune.outputs.report import report_markdown

__all__ = ["report_for", "context_lines"]


def context_lines(problem) -> list[str]:
    w, m, c = problem.workload, problem.model, problem.cluster
    return [f"model: {m.name} ({m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads)",
            f"workload: training, global batch {w.global_batch} x {w.seq_len} tokens, {w.dtype}, attention {w.attention_impl}",
            f"cluster: {c.name}, {problem.gpus} x {c.device.name} ({c.gpus_per_node} per node)",
            f"search: space {problem.space.name}, method {problem.method}, seed {problem.seed}"]


def report_for(problem, result) -> str:
    return report_markdown(title=f"Plan for {problem.model.name} on {problem.gpus} GPUs", plan=result.plan,
                           estimate=result.estimate, capacity_bytes=problem.cluster.device.memory_bytes,
                           baselines=result.baselines, context=context_lines(problem), stats=vars(result.stats))
