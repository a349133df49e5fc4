"""Peak tensor memory on CPU: the allocator-event accounting against known allocations."""

import pytest

torch = pytest.importorskip("torch")

from autotune.validate.memory import TensorMemoryTracker, live_tensor_bytes, window_peak  # noqa: E402


def _alloc(ts, addr, nbytes, total=0):
    return {"name": "[memory]", "ts": ts, "args": {"Addr": addr, "Bytes": nbytes, "Device Type": 0,
                                                   "Total Allocated": total}}


def test_window_peak_pairs_by_address_and_retires_unreported_frees():
    events = [
        _alloc(1, 0xA, 100),
        _alloc(2, 0xB, 50),  # freed later on an unwatched thread: no event
        {"name": "step", "ts": 3, "dur": 10},
        _alloc(4, 0xC, 400),
        _alloc(5, 0xC, -400),
        _alloc(6, 0xB, 70),  # 0xB handed out again: the old 50 bytes were freed
        _alloc(7, 0xD, 20),
        _alloc(20, 0xE, 1000),  # after the window
    ]
    baseline, peak, end = window_peak(events, "step")
    assert baseline == 150
    assert peak == 550
    assert end == 100 + 70 + 20 + 1000


def test_window_peak_reads_the_allocator_total_when_counted():
    events = [
        _alloc(1, 0xA, 100, total=100),
        {"name": "step", "ts": 3, "dur": 10},
        _alloc(4, 0xB, 400, total=650),  # 150 more were allocated on an unwatched thread
        _alloc(5, 0xB, -400, total=250),
        _alloc(6, 0xC, 10, total=60),  # and 200 freed there
        _alloc(20, 0xD, 1, total=61),
    ]
    assert window_peak(events, "step", counted=True) == (250, 650, 61)


def test_gloo_thread_allocations_are_counted():
    import threading

    held = []
    with TensorMemoryTracker() as tracker:
        with tracker.window():
            worker = threading.Thread(target=lambda: held.append(torch.zeros(250_000)))  # 1 MB off the main thread
            worker.start()
            worker.join()
            marker = torch.zeros(10)
    if not tracker._counted:
        pytest.skip("this torch build does not export c10's CPU memory counter")
    assert tracker.peak_bytes >= 1_000_000 + marker.numel() * 4


def test_tracker_measures_a_known_step():
    keep = 1_000_000
    with TensorMemoryTracker() as tracker:
        persistent = torch.zeros(keep // 4)
        with tracker.window():
            transient = torch.ones(3 * keep // 4)
            del transient
            small = torch.ones(keep // 8)
        del small
    assert tracker.baseline_bytes >= keep
    assert tracker.peak_bytes - tracker.baseline_bytes == pytest.approx(3 * keep, rel=0.01)
    assert persistent.numel() == keep // 4


def test_tracker_count_matches_live_tensors_after_training_steps():
    from autotune.spec.presets import load_preset
    from autotune.validate.model import build_model

    spec = load_preset("small").with_changes(num_layers=1, hidden_size=64, num_heads=2, num_kv_heads=2,
                                             ffn_hidden_size=128, vocab_size=97, max_seq_len=16)
    live_before = live_tensor_bytes()
    with TensorMemoryTracker() as tracker:
        model = build_model(spec)
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        tokens = torch.randint(0, 97, (2, 17))
        for _ in range(2):
            with tracker.window():
                logits = model(tokens[:, :-1])
                torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            del logits
    params = sum(p.numel() for p in model.parameters()) * 4
    created = live_tensor_bytes() - live_before
    assert tracker.end_bytes - tracker.start_bytes == pytest.approx(created, rel=0.02)
    assert tracker.baseline_bytes >= 3 * params  # weights and two Adam moments before the step
    assert tracker.peak_bytes > tracker.baseline_bytes + params  # gradients and activations on top
