"""How DeepSpeed's ZeRO-3 of 2021 (releases 0.3.13-0.4.x, PyTorch 1.8, NCCL 2.8) issued its
collectives: the sources of the deepspeed-2021 runtime preset (autotune/data/runtimes/deepspeed-2021.toml),
priced by cost/zero3_calls.py.

Read from the code of the time (microsoft/DeepSpeed at v0.3.13-v0.3.16):

* each parameter tensor of at least ``param_persistence_threshold`` elements is gathered by its
  own ``torch.distributed.all_gather`` (partition_parameters.py ``_allgather_param``, called per
  parameter by stage3.py ``fetch_sub_module``), and each one's gradient reduce-scattered by its
  own ``reduce_scatter`` (``_reduce_scatter_gradient``); smaller tensors (biases, norms) persist;
* a module's fetch waits for its gather and synchronises the device, then prefetches the next
  tensor in the recorded module order (one tensor: each is above ``prefetch_bucket_size``, 5e7
  elements, for GPT-3) before the module's compute is queued, so that gather runs beside this
  module's compute (stage3.py ``fetch_sub_module``, ``prefetch_next_sub_modules``); PR #1188's
  "not async at all" concerns prefetches of several tensors, each of whose gathers first
  synchronises the device (``_allgather_param``);
* that gather first builds the list of per-rank output views in a Python loop
  (``flat_tensor.narrow`` per rank) after ``torch.cuda.synchronize()``: the device idles;
* both pass lists of world-size tensors, which PyTorch 1.8's ProcessGroupNCCL flattens, running
  one copy per rank (allgather copies each chunk out after the collective, reduce_scatter each
  input in before it); ``_all_gather_base`` (pytorch/pytorch#56315, April 2021) came later;
* a module's gathered weights are released after its forward unless their next use lies within
  ``max_reuse_distance`` elements of parameters (stage3.py ``_keep_for_later``); under full
  recomputation the backward follows the layer's recomputed forward, so a tensor is gathered a
  third time when twice the elements of the layer's later tensors exceed that distance;
* the collectives ran on NCCL 2.8, whose ring latency grows by a step per rank and picks the
  protocol (LL, LL128, Simple) per call (cost/comm.py nccl_2_8_ring_s).
"""

from __future__ import annotations

__all__ = ["DEEPSPEED_2021_PERSISTENCE_ELEMENTS", "DEEPSPEED_2021_MAX_REUSE_ELEMENTS", "PYTHON_OP_S"]

# zero/constants.py at v0.3.13-v0.4.5: ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT = 100000
DEEPSPEED_2021_PERSISTENCE_ELEMENTS = 100_000
# zero/constants.py at v0.3.13-v0.4.5: ZERO_OPTIMIZATION_MAX_REUSE_DISTANCE_DEFAULT = 1000000000
DEEPSPEED_2021_MAX_REUSE_ELEMENTS = 1_000_000_000
# One Python-level PyTorch op on the host: ~2 us, about half of it Python's (PyTorch maintainer in
# pytorch/pytorch#41383, July 2020, PyTorch 1.5/1.6); priced once per rank and gather (the narrow;
# the same loop's torch.distributed.get_rank call is left out, no figure).
PYTHON_OP_S = 2e-6
