"""How much NVIDIA's published MoE step times move between NeMo containers at one configuration.

NeMo / Megatron-Bridge re-measure the same model, GPU count, precision and parallel layout in
every container release (tests/data/modern_runs.csv and nemo_moe_archive.csv). A cost model
that does not know the container can at best predict the middle of a configuration's range;
its worst error on that configuration is then at least (r - 1) / (r + 1) for r = slowest /
fastest published step. This prints each configuration measured in two or more containers,
the published and predicted step times per container, r and that floor.

    python scripts/nemo_container_spread.py
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from autotune.calibrate.published import check_published

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
FILES = ("modern_runs.csv", "nemo_moe_archive.csv")


def _container(source: str) -> str:
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", source)
    return match.group(1) if match else "?"


def _config(check) -> tuple:
    """What stays fixed across containers: GPU, model, precision, batch and the parallel layout."""
    run, plan = check.run, check.run.plan
    stage = plan.stages[0]
    model = re.split(r"\s*\(", run.model.name)[0].lower()
    return (run.regime.split(" | ")[0], model, run.workload.dtype, plan.gpus, plan.global_batch,
            plan.micro_batch, stage.tp, len(plan.stages), stage.cp, stage.ep, plan.vpp)


def _release_key(container: str) -> tuple:
    return tuple(int(part) for part in container.split(".") if part.isdigit())


def main() -> None:
    groups: dict[tuple, list] = {}
    for name in FILES:
        checks, _ = check_published(DATA / name)
        for check in checks:
            if check.run.model.is_moe and check.run.source.startswith("NVIDIA-NeMo"):
                groups.setdefault(_config(check), []).append(check)
    floors = []
    for config, checks in sorted(groups.items(), key=lambda kv: str(kv[0])):
        containers = {_container(c.run.source) for c in checks}
        if len(containers) < 2:
            continue
        times = [c.run.iter_s for c in checks]
        ratio = max(times) / min(times)
        floors.append((ratio - 1) / (ratio + 1))
        gpu, model, dtype, gpus, gbs, mb, tp, pp, cp, ep, vpp = config
        print(f"{gpu} {model} {dtype} {gpus} GPUs, GBS {gbs}, mb {mb}, tp {tp} pp {pp} cp {cp} ep {ep} vpp {vpp}: "
              f"slowest / fastest {ratio:.2f}, floor of the worst error {100 * floors[-1]:.0f}%")
        for c in sorted(checks, key=lambda c: _release_key(_container(c.run.source))):
            print(f"    {_container(c.run.source):9s} {c.run.run_id:14s} published {c.run.iter_s:8.2f} s  "
                  f"predicted {c.estimate.step_time_s:8.2f} s  {100 * c.error:+6.1f}%")
    if floors:
        print(f"{len(floors)} configurations in two or more containers; floor of the worst error: median "
              f"{100 * statistics.median(floors):.0f}%, largest {100 * max(floors):.0f}%")


if __name__ == "__main__":
    main()
