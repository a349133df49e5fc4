"""A published serving row's parallel layout: its GPU count, tensor / pipeline / expert degrees, replicas and
whether attention ran data-parallel, from the row's cells and notes or its published system's config."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.calibrate.serving_names import RowProblem
from autotune.calibrate.serving_systems import PublishedSystem
from autotune.errors import require

__all__ = ["RowDegrees", "row_int", "row_degrees"]


@dataclass(frozen=True, kw_only=True)
class RowDegrees:
    """A row's layout: ``replicas`` engine instances of ``tp`` x ``pp`` GPUs, experts over ``ep``,
    attention data-parallel or not, and what was assumed to read it so."""

    tp: int
    pp: int
    replicas: int
    ep: int
    attention_dp: bool
    assumed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "replicas", "ep"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


def row_int(row: dict, column: str) -> int | None:
    """The integer in a cell, None where it is empty."""
    text = row.get(column, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise RowProblem(f"{column} {text!r} is not an integer") from None


# How sources name attention data parallelism: TensorRT-LLM's enable_attention_dp and its perf pages'
# DEP<n> columns (attention DP with n-way EP; TEP<n> is tensor-parallel attention), SGLang's
# --enable-dp-attention, InferenceX's "DPA" / "dp-attn" columns, and the words ("attention DP", "DP4 Attn",
# "data-parallel attention", "ADP").
_ADP_WORDS = re.compile(r"attention[ _-]?dp|attn[ _-]dp|\bdp\d*[ _-]?att(?:ention|n)\b|\badp\b|\bdpa\b|\bdep\d+\b"
                        r"|attention[ _-]data[ _-]parallel(?:ism)?|data[ _-]parallel(?:ism)?[ _-]attention", re.I)
# ... and how they say it was off: "no / without / not attention DP", "enable_attention_dp: false",
# "data-parallel attention left at its default, off", "DPA false", "DP attention not stated" (a clause, not
# past ; . or a bracket)
_ADP_OFF_BEFORE = re.compile(r"\b(?:no|not|without|disabled?)[ -]+(?:\w+[ -]+)?$", re.I)
_ADP_ON_AFTER = re.compile(r"^\W{0,3}(?:true|on|enabled)\b", re.I)
_ADP_OFF_AFTER = re.compile(r"^[^;.()]{0,30}?\b(?:false|off|disabled|not stated|unknown)\b", re.I)


def _attention_dp(row: dict) -> bool:
    """Whether the row's notes say attention ran data-parallel: any mention, unless one says it was off."""
    notes = row.get("notes", "")
    mentions = list(_ADP_WORDS.finditer(notes))
    return bool(mentions) and not any(_adp_off(notes, m) for m in mentions)


def _adp_off(notes: str, mention: re.Match) -> bool:
    after = notes[mention.end():]
    if _ADP_ON_AFTER.match(after):
        return False
    return bool(_ADP_OFF_BEFORE.search(notes[:mention.start()]) or _ADP_OFF_AFTER.match(after))


def _counts(row: dict, system: PublishedSystem | None) -> tuple[int, int, int, int, int | None, tuple[str, ...]]:
    """(gpus, tp, pp, ep, dp, assumptions): the cells, a GPU count from the GPU cell ('8x H100') or
    tp x pp x dp, tp from the system's published config (one GPU: 1)."""
    gpus, tp, pp, ep, dp = (row_int(row, c) for c in ("gpus", "tp", "pp", "ep", "dp"))
    assumed = ()
    if system is not None and tp is None:  # the system's degrees, only where the row states no tp of its own
        pp, ep, assumed = _system_degrees(system, pp, ep)
    counted = re.match(r"\s*(\d+)\s*x\s*\D", row.get("gpu", ""), flags=re.I)
    if gpus is None and counted:
        gpus, assumed = int(counted.group(1)), (f"{counted.group(1)} GPUs (the gpu cell)",)
    if gpus is None and tp:
        gpus, assumed = tp * (pp or 1) * (dp or 1), (f"{tp * (pp or 1) * (dp or 1)} GPUs (tp x pp x dp)",)
    if gpus is None:
        raise RowProblem("the row states no GPU count")
    if tp is None and system is not None and system.get("tp"):
        tp, assumed = system.get("tp"), assumed + (system.note("tp"),)
    if tp is None and gpus == 1:
        tp, assumed = 1, assumed + ("tp 1 (one GPU)",)
    if tp is None:  # a row naming only its GPUs: one instance over those the other degrees leave
        tp, rest = divmod(gpus, (pp or 1) * (dp or 1))
        if rest or not tp:
            raise RowProblem(f"the row states no tensor-parallel degree and pp x dp does not divide its {gpus} GPUs")
        assumed = assumed + (f"tp {tp} (no degree stated: the {gpus} GPUs as one tensor-parallel instance"
                             + (" per pp x dp" if (pp or 1) * (dp or 1) > 1 else "") + ")",)
    return gpus, tp, pp or 1, ep or 1, dp, assumed


def _system_degrees(system: PublishedSystem, pp: int | None, ep: int | None) -> tuple[int | None, int | None,
                                                                                    tuple[str, ...]]:
    """(pp, ep, assumptions): the row's cells, else its system's published pipeline and expert degrees."""
    assumed = ()
    if pp is None and system.get("pp"):
        pp, assumed = system.get("pp"), (system.note("pp"),)
    if ep is None and system.get("ep"):
        ep, assumed = system.get("ep"), assumed + (system.note("ep"),)
    return pp, ep, assumed


def row_degrees(row: dict, system: PublishedSystem | None) -> RowDegrees:
    """The row's degrees from its gpus / tp / pp / ep / dp cells (_counts). A replica is one engine
    instance of tp x pp GPUs: with DP attention its dp ranks share one MoE."""
    gpus, tp, pp, ep, dp, assumed = _counts(row, system)
    attention_dp = _attention_dp(row)
    if not attention_dp and system is not None and system.get("attention_dp") and not row_int(row, "tp"):
        attention_dp, assumed = True, assumed + (system.note("attention_dp"),)
    if pp > 1:
        if ep > tp or attention_dp:
            raise RowProblem(f"pp {pp} with expert parallelism over tp x dp or DP attention is not modelled")
        replicas = dp if dp else gpus // (tp * pp)
        if replicas * tp * pp != gpus:
            raise RowProblem(f"tp {tp} x pp {pp} x dp {replicas} does not make the {gpus} GPUs")
        return RowDegrees(tp=tp, pp=pp, replicas=replicas, ep=ep, attention_dp=False, assumed=assumed)
    if ep > tp:  # vLLM's --data-parallel-size with --enable-expert-parallel, TRT-LLM's ADP: experts over tp x dp
        if ep % tp or gpus % ep or (dp and tp * dp != ep):
            raise RowProblem(f"ep {ep} is not tp {tp} x dp {dp or '?'}: the experts span no whole replica")
        return RowDegrees(tp=ep, pp=1, replicas=gpus // ep, ep=ep, attention_dp=True, assumed=assumed + (
            f"ep {ep} over tp {tp} x dp {ep // tp}: one replica of {ep} GPUs, attention data-parallel",))
    if attention_dp and dp and tp == gpus and dp * tp != gpus:  # SGLang --tp 8 --dp 8 --enable-dp-attention
        return RowDegrees(tp=tp, pp=1, replicas=1, ep=ep, attention_dp=True,
                          assumed=assumed + (f"dp {dp} is the attention-DP degree inside the tp-{tp} replica",))
    replicas = dp if dp else gpus // tp
    if replicas * tp != gpus:
        raise RowProblem(f"tp {tp} x dp {replicas} does not make the {gpus} GPUs")
    return RowDegrees(tp=tp, pp=1, replicas=replicas, ep=ep, attention_dp=attention_dp, assumed=assumed)
