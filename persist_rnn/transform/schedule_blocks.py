"""What the untiled rules (RegisterReduction, RowReductionFallback) read of a function first: its
blocks after dlight's inlining, and each block's loops by kind."""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import try_inline


def inlined_blocks(rule, func, target) -> tuple[s_tir.Schedule, list] | None:
    """(a schedule of `func`, the SBlockInfo of each block left after inlining), or None where
    `rule` cannot take `func` (not a PrimFunc, not its target, blocks dlight cannot normalize)."""
    if not isinstance(func, tirx.PrimFunc) or not rule.is_target_available(target):
        return None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    return None if infos is None else (sch, try_inline(sch, infos))


def loops_by_kind(sch: s_tir.Schedule, info) -> dict:
    """The block's loops as {"S": spatial, "R": reduction, "O": other}, each outermost first."""
    by_kind = {"S": [], "R": [], "O": []}
    for loop, kind in zip(sch.get_loops(info.block_rv), info.dom_kind()):
        by_kind[kind].append(loop)
    return by_kind
