"""Cache-aware layer grouping: a group's weights stay in the on-chip cache while tiles stream.

Inside a stage, consecutive layers form groups of ``g``; a micro-batch's tokens pass through a
group in tiles of ``T`` tokens. The group's weight shard is pinned in the L2 cache's persisting
set-aside (CUDA's access-policy window) and read from HBM once per micro-batch; each tile then
re-reads it from the cache. A tile's intermediate activations stay in the cache; only the group's
input and output, what must persist (K and V for the KV cache, activations saved for backward)
and the K/V history attention reads go to HBM. When one group holds all of a stage's layers the
weights stay pinned across micro-batches and decode steps, so HBM never re-reads them: the seed
experiment's "weights stay in fast on-chip memory" (seed 004), Welder's tile-level memory
planning and PipeSwitch's layer grouping (seed 001). Each tile launches every kernel again.

    op time = max(k * tiles * lat_c + flops * s/FLOP,
                  k * tiles * lat_m + hbm_bytes * s/byte(HBM) + cache_bytes * s/byte(cache))
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.cost.compute import BlockTimes, op_amounts, op_coefficients
from autotune.errors import AutotuneError
from autotune.graph.table import OpTable
from autotune.spec.hardware import DeviceProfile, MemoryTier

__all__ = ["PERSISTING_FRACTION", "cache_tier", "layer_weight_bytes", "tile_bytes_per_token",
           "grouping_fits", "grouping_choices", "check_grouping", "grouped_block_times", "training_out_to_hbm",
           "training_grouped_layer", "effective_group"]

# Share of L2 that may be set aside for persisting accesses: the CUDA Programming Guide
# (sec. 4.13.1, "L2 cache set-aside for persisting accesses") sets aside
# min(0.75 * l2CacheSize, persistingL2CacheMaxSize); A100 reports persistingL2CacheMaxSize
# 31457280 of l2CacheSize 41943040 = 0.75 (NVIDIA developer forum thread 275542). The rest of the
# cache holds the streaming tiles.
PERSISTING_FRACTION = 0.75


def cache_tier(device: DeviceProfile) -> MemoryTier:
    """The on-chip cache tier (``sram``: L2 on GPUs)."""
    if not device.has_tier("sram"):
        raise AutotuneError("cache_group_layers", f"{device.name} has no 'sram' (on-chip cache) tier; use 0 (no grouping)")
    return device.tier("sram")


def layer_weight_bytes(table: OpTable, tp: int) -> float:
    """Weight bytes of one layer per GPU under ``tp``."""
    return float(op_amounts(table, 1, tp, 1, False).weight_bytes.sum())


def tile_bytes_per_token(table: OpTable, tokens_per_seq: int, tp: int, sequence_parallel: bool) -> float:
    """Live activation bytes per token of a tile per GPU: the largest operator's input and output
    plus the residual stream that skips it (attention's K/V history streams from HBM)."""
    amounts = op_amounts(table, 1, tp, 1, sequence_parallel)
    # attention holds the tile's queries and output (as wide as its output); K and V stream
    attention = np.array([k == "attention" for k in table.kinds])
    live = np.where(attention, amounts.act_out_bytes * 2.0, amounts.act_in_bytes + amounts.act_out_bytes)
    residual = amounts.act_in_bytes[0]  # the layer's input, kept for the residual add
    return float((live.max() + residual) / tokens_per_seq)


def grouping_fits(weight_bytes: float, per_token_bytes: float, capacity_bytes: float,
                  group_layers: int, tile_tokens: int) -> bool:
    """The group's weights fit the persisting set-aside, and weights plus a tile the cache."""
    weights = group_layers * weight_bytes
    return weights <= PERSISTING_FRACTION * capacity_bytes and weights + tile_tokens * per_token_bytes <= capacity_bytes


def grouping_choices(table: OpTable, device: DeviceProfile, *, tp: int, sequence_parallel: bool,
                     num_layers: int, tokens_per_seq: int, tokens_per_microbatch: int) -> list[tuple[int, int]]:
    """Valid ``(cache_group_layers, cache_tile_tokens)`` of a stage, ``(0, 0)`` (off) first.

    Tiles are powers of two up to the micro-batch's tokens, plus the whole micro-batch.
    """
    if not device.has_tier("sram"):
        return [(0, 0)]
    capacity = cache_tier(device).capacity_bytes
    weight = layer_weight_bytes(table, tp)
    per_token = tile_bytes_per_token(table, tokens_per_seq, tp, sequence_parallel)
    tiles = sorted({2 ** k for k in range(int(np.log2(max(tokens_per_microbatch, 1))) + 1)} | {tokens_per_microbatch})
    return [(0, 0)] + [(g, t) for g in range(1, num_layers + 1) for t in tiles
                       if grouping_fits(weight, per_token, capacity, g, t)]


def check_grouping(table: OpTable, device: DeviceProfile, *, tp: int, sequence_parallel: bool, group_layers: int,
                   tile_tokens: int, tokens_per_seq: int) -> None:
    """Raise an AutotuneError naming what would fit when the group or its tile does not."""
    if group_layers == 0:
        return
    capacity = cache_tier(device).capacity_bytes
    weight = layer_weight_bytes(table, tp)
    per_token = tile_bytes_per_token(table, tokens_per_seq, tp, sequence_parallel)
    if grouping_fits(weight, per_token, capacity, group_layers, tile_tokens):
        return
    max_layers = int(PERSISTING_FRACTION * capacity // weight)
    if group_layers > max_layers:
        raise AutotuneError("cache_group_layers", (
            f"{group_layers} layers need {group_layers * weight / 2**20:.1f} MiB of weights per GPU; "
            f"the persisting L2 of {device.name} holds {PERSISTING_FRACTION * capacity / 2**20:.1f} MiB: "
            + (f"use at most {max_layers}" if max_layers else "no layer fits at this tp; use 0 (no grouping)")))
    max_tile = int((capacity - group_layers * weight) // per_token)
    raise AutotuneError("cache_tile_tokens", f"a tile of {tile_tokens} tokens needs {tile_tokens * per_token / 2**20:.1f} MiB "
                        f"beside the group's weights; use at most {max_tile} tokens")


def effective_group(group_layers: int, num_layers: object) -> int:
    """The layers a group really holds: at most the stage's (checked per plan, not per array)."""
    return group_layers if np.ndim(num_layers) else min(group_layers, int(num_layers))


def training_out_to_hbm(table: OpTable, recompute: str) -> np.ndarray:
    """Share of each operator's output written to HBM in a training forward: what the next
    operator saves for backward (all of it unless full recomputation keeps only layer inputs)."""
    saves_input = np.append(table.saved_bytes[1:] > 0, False)
    return np.where(saves_input & (recompute != "full"), 1.0, 0.0)


def _hbm_shares(table: OpTable, group_layers: np.ndarray, out_to_hbm: np.ndarray,
                kv_rereads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Share of each operator's input and output that is HBM traffic (the rest is cache)."""
    n = len(table)
    boundary = 1.0 / np.maximum(group_layers, 1.0)  # a group's input/output, spread over its layers
    first = np.arange(n) == 0
    attention = np.array([k in ("attention", "bmm") for k in table.kinds])
    in_share = np.where(attention, kv_rereads, np.where(first, boundary, 0.0))
    last = np.arange(n) == n - 1
    out_share = np.maximum(np.asarray(out_to_hbm, dtype=float), np.where(last, boundary, 0.0))
    return in_share, out_share


def grouped_block_times(base: BlockTimes, table: OpTable, device: DeviceProfile, dtype: str, *, micro_batch: object,
                        tp: int, cp: int, sequence_parallel: bool, group_layers: int, tile_tokens: int,
                        num_layers: object, tokens_per_seq: int, out_to_hbm: np.ndarray) -> BlockTimes:
    """``base`` with the forward times of a grouped, tiled layer (see the module docstring).

    ``num_layers`` (a number or an array) is the stage's layer count: a group that covers it
    keeps its weights resident. ``out_to_hbm`` is the share of each operator's output that must
    reach HBM (K and V, or activations saved for backward).
    """
    coef = op_coefficients(table, device, dtype)
    spc = 1.0 / (cache_tier(device).bandwidth_bytes_per_s * device.kernel_efficiency)
    amounts = op_amounts(table, micro_batch, tp, cp, sequence_parallel)
    tokens = np.asarray(micro_batch, dtype=float)[..., None] * tokens_per_seq / cp
    tiles = np.maximum(1.0, np.ceil(tokens / tile_tokens))
    seq_tiles = max(1.0, np.ceil(tokens_per_seq / cp / tile_tokens))
    n = np.asarray(num_layers, dtype=float)[..., None]
    group = np.minimum(group_layers, n)
    resident = group_layers >= n
    in_share, out_share = _hbm_shares(table, group, out_to_hbm, (seq_tiles + 1.0) / 2.0)
    act_in, act_out, weights = amounts.act_in_bytes, amounts.act_out_bytes, amounts.weight_bytes
    hbm = act_in * in_share + act_out * out_share + np.where(resident, 0.0, weights)
    cache = act_in * np.maximum(1.0 - in_share, 0.0) + act_out * (1.0 - out_share) \
        + weights * (tiles - np.where(resident, 0.0, 1.0))
    launches = table.kernels * tiles
    fwd = np.maximum(launches * coef.lat_c + amounts.flops * coef.spf,
                     launches * coef.lat_m + hbm * coef.spb + cache * spc)
    return replace(base, fwd_ops_s=fwd, selective_fwd_s=(fwd * table.selective).sum(-1), weight_cast_fwd_ops_s=0.0)


def training_grouped_layer(ctx: object, stage: object, base: BlockTimes, num_layers: object) -> BlockTimes:
    """The layer of a training stage (``ctx``: a StageContext) with its cache grouping applied."""
    table, device = ctx.tables.layer, ctx.cluster.device
    check_grouping(table, device, tp=stage.tp, sequence_parallel=stage.sequence_parallel,
                   group_layers=effective_group(stage.cache_group_layers, num_layers),
                   tile_tokens=stage.cache_tile_tokens, tokens_per_seq=ctx.tables.seq_len)
    return grouped_block_times(
        base, table, device, ctx.workload.dtype, micro_batch=ctx.micro_batch, tp=stage.tp, cp=stage.cp,
        sequence_parallel=stage.sequence_parallel, group_layers=stage.cache_group_layers,
        tile_tokens=stage.cache_tile_tokens, num_layers=num_layers, tokens_per_seq=ctx.tables.seq_len,
        out_to_hbm=training_out_to_hbm(table, stage.recompute))
