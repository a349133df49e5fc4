"""The search's shortcuts give exactly what the plain computations they replace give."""

import importlib
import sys

import numpy as np
import pytest

tables = importlib.import_module("autotune.search.tables")


@pytest.mark.parametrize("seed", range(40))
def test_best_by_inflight_sorting_matches_scoring_every_depth(seed):
    """Per (n, position, r): the same fitting choice (lowest index among equal scores) and the
    same verdict where none fits, ties, infinities and exact capacity boundaries included."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        C, n, R = int(rng.integers(1, 12)), int(rng.integers(1, 9)), int(rng.integers(1, 20))
        score = rng.choice([1.0, 2.0, 2.5], size=(C, n, 4)) if seed % 2 else rng.random((C, n, 4))
        score[rng.random(score.shape) < 0.1] = np.inf
        base = np.round(rng.random((C, n, 4)) * 40) / 4  # quarters: base + r * per hits the capacity exactly
        per = np.round(rng.random((C, n, 4)) * rng.choice([0.0, 1.0, 12.0])) / 4
        base[rng.random(base.shape) < 0.05] = np.inf
        per[rng.random(per.shape) < 0.05] = np.inf
        cap = float(rng.choice([0.0, 5.0, 7.25, 10.0]))
        slow = tables._best_by_scoring(score, base, per, R - 1, cap)
        fast = tables._best_by_sorting(score, base, per, R - 1, cap)
        assert fast is not None
        assert np.array_equal(slow[1], fast[1])
        assert np.array_equal(np.where(slow[1], slow[0], -1), np.where(fast[1], fast[0], -1))


@pytest.mark.parametrize("seed", range(20))
def test_best_by_inflight_of_one_choice_is_the_general_pass(seed):
    """One choice (a uniform member's tables) takes its own shortcut: the same tables as the
    general pass over it and a second choice that never fits (index 0 or none), at depths that
    score every depth and depths that sort, with NaN and infinite tails and exact capacity hits."""
    rng = np.random.default_rng(700 + seed)
    B, n = int(rng.integers(1, 40)), int(rng.integers(2, 9))
    shape = (2, n, 4)
    time, tail = rng.choice([1.0, 2.0, np.inf], size=shape), rng.choice([0.5, 1.0, np.inf, np.nan], size=shape, p=[.4, .4, .1, .1])
    base, per = np.round(rng.random(shape) * 40) / 4, np.round(rng.random(shape) * 12) / 4
    costs = tables.ChoiceCosts(choice=None, time_s=time, tail_s=tail, mem_base_bytes=base, mem_per_microbatch_bytes=per)
    never = tables.ChoiceCosts(choice=None, time_s=np.full(shape, np.inf), tail_s=tail, mem_base_bytes=np.full(shape, np.inf),
                               mem_per_microbatch_bytes=per)
    for depth in (1, 5, 30):
        cap = float(rng.choice([5.0, 7.25, 10.0]))
        one = tables.best_by_inflight([costs], 1, B, depth, cap)
        general = tables.best_by_inflight([costs, never], 1, B, depth, cap)
        for a, b in zip(one, general):
            assert a.shape == b.shape and a.tobytes() == b.tobytes()


def test_best_by_inflight_falls_back_where_memory_shrinks_with_depth():
    score, base, per = np.ones((2, 3, 4)), np.full((2, 3, 4), 5.0), np.full((2, 3, 4), -1.0)
    assert tables._best_by_sorting(score, base, per, 3, 4.0) is None
    best, ok = tables._best_by_scoring(score, base, per, 3, 4.0)
    assert ok[2:].all() and not ok[:1].any()


@pytest.mark.parametrize("num_layers", [1, 2, 3, 7, 20])
def test_pipeline_stage_matrices_match_the_gather(num_layers):
    from autotune.search.stage_tables import StageTables as _Tables

    rng = np.random.default_rng(num_layers)
    time = rng.random((3, num_layers + 1, 4, 5))
    time[rng.random(time.shape) < 0.1] = np.inf
    t = _Tables(time, 0.1 * time)
    for r in range(5):
        gathered = np.where(t.valid[None], time[:, t.n_idx, t.pos, r], np.inf)
        assert np.array_equal(t.time_at(r), gathered)
        for lo, hi, N, cap in [(0, num_layers + 1, num_layers, np.inf), (1, num_layers, max(1, num_layers // 2), 0.5),
                               (0, max(1, num_layers // 2), num_layers, 0.3)]:
            window = np.where(gathered[0].T <= cap, gathered[0].T, np.inf)[lo:hi, 1:N + 1]
            assert np.array_equal(t.window_under_cap(r, lo, hi, N, cap), window)  # without time_at
    values = np.unique(np.where(t.valid[None, None], time[:, t.n_idx, t.pos, :].transpose(0, 3, 1, 2), np.inf))
    assert np.array_equal(np.unique(np.append(t.stage_time_values(), np.inf)), values)


def test_collective_memo_returns_the_computed_times_read_only():
    from autotune.cost import comm
    from autotune.spec.resolve import resolve_cluster

    cluster = resolve_cluster("dgx-h100", None)
    span = comm.GroupSpan(4, 2)
    nbytes = np.array([[1e6], [3e6], [0.0]])
    first = comm.collective_time_s("all_reduce", nbytes, span, cluster)
    again = comm.collective_time_s("all_reduce", nbytes.copy(), span, cluster)
    assert again is first and not first.flags.writeable
    assert np.array_equal(first, comm._collective_time_s("all_reduce", nbytes, span, cluster))
    assert comm.collective_time_s("all_gather", 2e6, span, cluster) == comm._collective_time_s("all_gather", 2e6, span, cluster)
    other = resolve_cluster("dgx-a100-80gb", None)
    assert comm.collective_time_s("all_reduce", nbytes, span, other) is not first


def test_studies_in_worker_processes_give_the_same_search(monkeypatch):
    """The forked studies (autotune.search.parallel) change nothing: plan, estimate, trials (a
    space with stages of their own choices: uniform spaces price lazily, autotune.search.uniform)."""
    from autotune.search import parallel
    from autotune.search.api import search

    monkeypatch.setenv("AUTOTUNE_PROCESSES", "1")
    serial = search("large", 16, cache=False, space="default")
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")
    monkeypatch.setattr(parallel, "MIN_STUDIES", 2)
    ran = []
    real = parallel.run_studies
    monkeypatch.setattr(parallel, "run_studies", lambda search_, keys: ran.append(out := real(search_, keys)) or out)
    forked = search("large", 16, cache=False, space="default")
    assert ran and ran[0] or not parallel._can_fork()
    assert forked.plan == serial.plan and forked.estimate == serial.estimate
    assert (forked.stats.num_trials, forked.stats.num_intra_op_studies) == (serial.stats.num_trials, serial.stats.num_intra_op_studies)


def test_no_worker_processes_when_asked_or_too_few_studies(monkeypatch):
    from autotune.search import parallel

    monkeypatch.setenv("AUTOTUNE_PROCESSES", "1")
    assert parallel.processes() == 1 and parallel.run_studies(None, [(1, 1)] * 100) == {}
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")
    assert parallel.run_studies(None, [(1, 1)] * (parallel.MIN_STUDIES - 1)) == {}


@pytest.mark.parametrize("model, gpus, cluster", [("2.7b", 32, "dgx-a100-80gb"), ("large", 16, "dgx-h100")])
def test_evaluate_prices_each_distinct_stage_once_with_the_same_estimate(model, gpus, cluster):
    """Stages that differ only in where their layers start, their node or their in-flight
    micro-batches share one stage cost in evaluate_plan; the estimate equals pricing each stage."""
    from autotune.cost import evaluate as ev
    from autotune.cost.contract import stage_cost
    from autotune.search.api import search

    result = search(model, gpus, cluster=cluster, cache=False, space="default")  # every slice's plan kept
    plans = [p for p, _ in result.candidates] + [b.plan for b in result.baselines if b.plan is not None]
    assert any(p.pp > 2 for p in plans)
    spec, work = _model_and_workload(model)
    from autotune.spec.resolve import resolve_cluster

    cl = resolve_cluster(cluster, None)
    for plan in plans:
        fast = ev.evaluate_plan(spec, work, cl, plan, runtime=result.runtime)
        real = ev._stage_costs
        try:
            ev._stage_costs = lambda ctx, stages, positions, g: [stage_cost(ctx, s, p) for s, p in zip(stages, positions)]
            plain = ev.evaluate_plan(spec, work, cl, plan, runtime=result.runtime)
        finally:
            ev._stage_costs = real
        assert fast == plain


def _model_and_workload(name):
    from autotune.spec.presets import resolve_model
    from autotune.spec.resolve import training_workload

    spec = resolve_model(name)
    return spec, training_workload(spec, global_batch=None, seq_len=None, dtype="bf16", attention="flash")


def test_distinct_sorted_caps_equal_np_unique():
    from autotune.search.inter_op import _distinct_sorted

    rng = np.random.default_rng(3)
    for _ in range(200):
        values = rng.choice([0.5, 1.0, 2.0, 3.25, np.inf, 0.0, -0.0], size=int(rng.integers(0, 30)))
        assert np.array_equal(_distinct_sorted(values), np.unique(values))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="study workers run on Linux only")
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_study_workers_end_with_the_search(how, tmp_path):
    """Interrupted (exit 130, which leaves by os._exit) or killed while its studies run in
    workers, a search leaves no worker process behind."""
    import os
    import signal
    import subprocess
    import time
    import uuid

    marker = uuid.uuid4().hex
    env = {**os.environ, "AUTOTUNE_PROCESSES": "2", "AUTOTUNE_TEST_MARKER": marker}
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "search", "--model", "gpt3-13b", "--gpus", "64",
                             "--no-run-dir", "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_marked(marker)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the two workers are up
    if proc.poll() is not None:
        pytest.skip("the search ran its studies in one process (a busy or single-core machine)")
    proc.send_signal(getattr(signal, how))
    proc.wait(timeout=60)
    deadline = time.monotonic() + 20
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _marked(marker)


def _marked(marker: str) -> list[int]:
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_screen_tables_made_in_worker_processes_give_the_same_search(monkeypatch):
    """A uniform-stage search whose screens are priced by forked workers (parallel.price_tables:
    the time screens, then, once a plan is known, the memory and refined screens the slices left
    may ask for; the baselines beside the first) finds what it finds alone: plan, estimate and
    baselines."""
    from autotune.search import parallel, uniform
    from autotune.search.api import search

    monkeypatch.setenv("AUTOTUNE_PROCESSES", "1")
    serial = search("medium", 16, cache=False)
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")
    monkeypatch.setattr(parallel, "MIN_TABLES", 2)
    monkeypatch.setattr(uniform, "MIN_ROUND_TABLES", 1)
    made = []
    real = parallel.price_tables
    monkeypatch.setattr(parallel, "price_tables",
                        lambda search_, keys, least=None: made.append(out := real(search_, keys, least)) or out)
    forked = search("medium", 16, cache=False)
    assert len(made) == 3 and made[0] and made[1] or not parallel._can_fork()  # medium refines no class
    assert ("baselines",) in made[0] or not parallel._can_fork()  # scored by a worker beside the first tables
    assert forked.plan == serial.plan and forked.estimate == serial.estimate
    assert forked.stats.num_trials >= serial.stats.num_trials  # the rounds' floors: every class below the first plan
    assert forked.baselines == serial.baselines and forked.baselines


def test_rounds_of_screens_once_a_plan_is_known_change_no_answer(monkeypatch):
    """A search whose memory binds (GPT-3 6.7B on 8 GPUs of 40 GB: classes refined by each way of
    recomputing): with every round of screens forked (bare stages; then time and memory screens;
    then refined screens), the search finds the plan it finds alone and the exhaustive one."""
    from autotune.search import parallel, uniform
    from autotune.search.api import search

    kwargs = dict(cluster="dgx-a100-40gb", global_batch=64, seq_len=2048, cache=False, plots="none")
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "1")
    serial = search("gpt3-6.7b", 8, **kwargs)
    exhaustive = search("gpt3-6.7b", 8, method="exhaustive", **kwargs)
    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")
    monkeypatch.setattr(parallel, "MIN_TABLES", 2)
    monkeypatch.setattr(uniform, "MIN_ROUND_TABLES", 1)
    made = []
    real = parallel.price_tables
    monkeypatch.setattr(parallel, "price_tables",
                        lambda search_, keys, least=None: made.append(out := real(search_, keys, least)) or out)
    forked = search("gpt3-6.7b", 8, **kwargs)
    assert len(made) == 3 and all(made) or not parallel._can_fork()
    assert forked.plan == serial.plan == exhaustive.plan
    assert forked.estimate == serial.estimate
    # the rounds' floors are made for every class below the first plan, alone only for those that come up
    assert forked.stats.num_trials >= serial.stats.num_trials


@pytest.mark.parametrize("seed", range(20))
def test_most_layers_by_depth_matches_every_depth_against_every_layer_count(seed):
    """bounds._layers_held's linear form gives what comparing each depth with each n gives."""
    from autotune.search.bounds import _most_layers_by_depth

    rng = np.random.default_rng(seed)
    most = rng.integers(-1, 12, size=(3, 2, int(rng.integers(1, 30)))).astype(float)
    most[rng.random(most.shape) < 0.2] = np.inf
    top = int(rng.integers(1, 14))
    depths = np.arange(top + 1)
    n = np.arange(1, most.shape[-1] + 1)
    expected = np.where(most[..., None, :] >= depths[:, None], n, 0).max(axis=-1)
    assert np.array_equal(_most_layers_by_depth(most, top), expected)


@pytest.mark.parametrize("seed", range(10))
def test_blend_counts_is_the_interpolation_where_the_count_is_below_the_layers(seed):
    """In place it gives none + count / n (full - none) where both are finite and count < n, inf elsewhere."""
    rng = np.random.default_rng(seed)
    layers = int(rng.integers(1, 40))
    none = rng.random((layers + 1, 4))
    full = none + rng.random(none.shape)
    none[rng.random(none.shape) < 0.2], full[rng.random(full.shape) < 0.2] = np.inf, np.inf
    none[rng.random(none.shape) < 0.05] = np.nan
    k, n = np.arange(1, layers + 1.0)[:, None, None], np.arange(layers + 1.0)[None, :, None]
    counted = n > k
    fraction = np.where(counted, k / np.maximum(n, 1.0), 1.0)
    with np.errstate(invalid="ignore"):
        expected = np.where(counted & np.isfinite(none) & np.isfinite(full), none + fraction * (full - none), np.inf)
    assert np.array_equal(tables.blend_counts(none, full, fraction, counted), expected)


def test_screens_ready_no_is_kept_until_the_class_tables_are_priced():
    """A class whose screens' tables are not priced is not ready, and stays so while other
    classes' tables are priced (its "no" kept); once its own tasks are priced (without making its
    screens), it is ready, as the full check says."""
    from autotune.search.driver import SearchProblem, SliceSearch
    from autotune.search.space import load_space
    from autotune.spec.presets import resolve_model
    from autotune.spec.resolve import resolve_cluster, training_workload
    from autotune.spec.runtime import resolve_runtime

    model, runtime = resolve_model("large"), resolve_runtime(None)
    workload = training_workload(model, global_batch=None, seq_len=None, dtype="bf16", attention=runtime.attention_impl)
    problem = SearchProblem(model=model, workload=workload, runtime=runtime, cluster=resolve_cluster("dgx-h100", None),
                            gpus=64, space=load_space(runtime.space))
    screens = SliceSearch(problem, cache=None).uniform.screens
    dp = screens.dps()[0]
    mp = screens.submeshes(dp)[0][0]
    first, second = [rep for rep in screens.classes(dp, mp) if screens._degrees(mp, rep)[0]][:2]
    for memory in (False, True):
        assert not screens.screens_ready(mp, first, memory) and not screens.screens_ready(mp, second, memory)
    for kind, task_dp, task_mp, choice, positions, sizes, link in screens._screen_tasks(mp, second):
        screens.price(task_dp, task_mp, choice, list(positions), kind, sizes, link)  # another class's tables
    assert screens.screens_ready(mp, second, memory=False)
    assert (mp, first, False) in screens._unready and not screens.screens_ready(mp, first, memory=False)
    for kind, task_dp, task_mp, choice, positions, sizes, link in screens._screen_tasks(mp, first):
        screens.price(task_dp, task_mp, choice, list(positions), kind, sizes, link)
    assert screens.screens_ready(mp, first, memory=False)  # its "no" dropped: now from the cached tables
    assert not screens.screens_ready(mp, first, memory=True)  # its memory screen's tables still unpriced
    for kind, task_dp, task_mp, choice, positions, sizes, link in screens._memory_tasks(mp, first):
        screens.price(task_dp, task_mp, choice, list(positions), kind, sizes, link)
    assert screens.screens_ready(mp, first, memory=True)


def test_screens_ready_kept_no_is_the_full_checks_answer(monkeypatch):
    """Through a search whose memory binds, with its screens made by forked workers, every
    screens_ready answer is what the full check gives at that moment, and kept answers are used."""
    from autotune.search import parallel, screens, uniform
    from autotune.search.api import search

    monkeypatch.setenv("AUTOTUNE_PROCESSES", "2")
    monkeypatch.setattr(parallel, "MIN_TABLES", 2)
    monkeypatch.setattr(uniform, "MIN_ROUND_TABLES", 1)
    real = screens.Screens.screens_ready
    answers, kept = [], [0]

    def checked(self, mp, rep, memory):
        before = dict(self._unready)
        answer = real(self, mp, rep, memory)
        after = dict(self._unready)
        self._unready.clear()
        full = real(self, mp, rep, memory)  # nothing kept: the full check
        self._unready.clear()
        self._unready.update(after)
        answers.append(answer == full)
        key = (mp, rep, memory)
        kept[0] += key in before and before[key] == after.get(key) and not answer
        return answer

    monkeypatch.setattr(screens.Screens, "screens_ready", checked)
    search("gpt3-6.7b", 8, cluster="dgx-a100-40gb", global_batch=64, seq_len=2048, cache=False, plots="none")
    assert answers and all(answers) and kept[0] > 0
