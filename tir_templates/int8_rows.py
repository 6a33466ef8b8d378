"""Recurrent weights held as int8: how R carries them to a kernel, and how the kernel reads them.

A quantized model's R is int8 values times a scale (`CellSpec.int8_weights`). Where every row of
R is exactly q * s for integers -128 <= q <= 127 and one fp32 scale s a row, the pass hands an int8
kernel R packed (`pack`), in R's own fp32 buffer so that every lowering keeps one signature
(signature.py): row g's words 0 .. H/4 - 1 hold its q + 128 as bytes, four columns a word
(column 4j + k in byte k of word j), word H/4 holds s, the rest are zero. A lane's run of four
columns is then one 32-bit word: the kernel holds a quarter of the registers fp32 weights take.

The kernel turns byte k of a word into q exactly with one byte permute and one subtraction: the
byte placed under the exponent of 2^23 reads as the float 2^23 + (q + 128) (`int8_floats`;
`int8_value` in the CPU twin), and it multiplies the row's dot product by s once, after the sum.
Against the fp32 weights q * s (each rounded to fp32) the dot product differs only by fp32
rounding.

A layer whose batch buckets differ (int8 at B=1, fp16 on the tensor cores above it) gets R packed
for all of them: the other buckets read each weight back as q * s while they load it
(`packed_weight`), which is the fp32 weight bit for bit.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

#: the attribute of a kernel whose every bucket takes R packed, int8 or not (persistent/buckets.py)
PACKED_R_ATTR = "persist_rnn.packed_r"
#: the float whose low mantissa byte a permute fills: 2^23 (0x4B000000), and what to subtract
#: from 2^23 + (q + 128) to get q
EXPONENT_WORD, OFFSET = 0x4B000000, 8388608.0 + 128.0


def row_scales(r: np.ndarray) -> np.ndarray | None:
    """An fp32 scale per row of `r` (D, rows, H) that makes every weight exactly q * scale with
    integer -128 <= q <= 127 (q * scale rounded to fp32, as a dequantized model computes it), or
    None where some row has none. Candidates: the row's own largest |r| / 127 or / 128
    (per-channel symmetric quantization), its direction's (per tensor), and their fp32 neighbours."""
    r = np.asarray(r, dtype=np.float32)
    rows = r.reshape(-1, r.shape[-1])
    row_max = np.abs(rows).max(axis=1)
    direction_max = np.abs(r.reshape(r.shape[0], -1)).max(axis=1).repeat(rows.shape[0] // r.shape[0])
    scales = np.where(row_max == 0, np.float32(1), np.float32(0)).astype(np.float32)
    for base in (row_max / np.float32(127), direction_max / np.float32(127),
                 row_max / np.float32(128), direction_max / np.float32(128)):
        base = base.astype(np.float32)
        for s in (base, np.nextafter(base, np.float32(0)), np.nextafter(base, np.float32(np.inf))):
            todo = scales == 0
            if not todo.any():
                return scales.reshape(r.shape[:-1])
            scales[todo] = np.where(_exact(rows[todo], s[todo]), s[todo], np.float32(0))
    return scales.reshape(r.shape[:-1]) if (scales > 0).all() else None


def _exact(rows: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Per row: whether s > 0 makes every weight of it q * s, q an int8 value."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(rows / s[:, None])
        same = ((q.astype(np.float32) * s[:, None]).astype(np.float32) == rows).all(axis=1)
    return (s > 0) & same & (q.min(axis=1) >= -128) & (q.max(axis=1) <= 127)


def packable(r: np.ndarray) -> bool:
    """Whether `pack` takes R: whole words a row (H a multiple of 4) and a scale for every row."""
    return np.shape(r)[-1] % 4 == 0 and row_scales(r) is not None


def pack(r: np.ndarray) -> np.ndarray | None:
    """R (D, G*H, H) fp32 packed for an int8 kernel (see the module docstring), or None where
    `packable` says no."""
    r = np.asarray(r, dtype=np.float32)
    hidden = r.shape[-1]
    scales = row_scales(r) if hidden % 4 == 0 else None
    if scales is None:
        return None
    q = np.rint(r / scales[..., None]).astype(np.int32)
    words = (q + 128).astype(np.uint8).reshape(*r.shape[:-1], hidden // 4, 4).copy().view("<u4")[..., 0]
    packed = np.zeros(r.shape, dtype=np.uint32)
    packed[..., : hidden // 4] = words
    packed[..., hidden // 4] = scales.view(np.uint32)
    return packed.view(np.float32)


def unpack(packed: np.ndarray) -> np.ndarray:
    """The fp32 weights q * s a packed R stands for (the inverse of `pack`, for tests and reports)."""
    words = np.ascontiguousarray(packed, dtype=np.float32).view(np.uint32)
    hidden = words.shape[-1]
    q = words[..., : hidden // 4].copy().view(np.uint8).astype(np.float32) - 128.0
    scales = words[..., hidden // 4].view(np.float32)
    return (q * scales[..., None]).astype(np.float32)


def word(r, d, row, j):
    """Word j of packed row `row` of direction d, as the uint32 it holds."""
    return T.reinterpret("uint32", r[d, row, j])


def scale(r, d, row, hidden: int):
    """The scale of packed row `row` of direction d."""
    return r[d, row, hidden // 4]


def packed_weight(r, d, row, col, hidden: int):
    """The fp32 weight q * s at (d, row, col) of a packed R, exactly as the unpacked R holds it
    (`row_scales` made every q * s round to it). For kernels that hold fp16 or fp32 weights
    beside int8 buckets, which read it once, as they load their weights (`Layout.PACKED_R`)."""
    bits = ((word(r, d, row, col // 4) >> T.Cast("uint32", col % 4 * 8)) & T.uint32(0xFF)) | T.uint32(EXPONENT_WORD)
    return (T.reinterpret("float32", bits) - T.float32(OFFSET)) * scale(r, d, row, hidden)


def r_weight(L, r, d, row, col):
    """R's fp32 weight at (d, row, col) as a kernel of layout L loads it: from the packed words
    where R comes packed for another bucket (`L.PACKED_R`), else as R holds it."""
    return packed_weight(r, d, row, col, L.H) if L.PACKED_R else r[d, row, col]


def int8_value(w, k: int):
    """Byte k of the packed word w as the float q (exact), with shifts and masks (the CPU twin):
    the byte under the exponent of 2^23, minus 2^23 + 128."""
    bits = ((w >> T.uint32(8 * k)) & T.uint32(0xFF)) | T.uint32(EXPONENT_WORD)
    return T.reinterpret("float32", bits) - T.float32(OFFSET)


@T.macro
def int8_floats(wq, w):
    """The four bytes of the packed word w as the floats 2^23 + (q + 128), one `prmt` each, into
    `wq` (subtract OFFSET for q). The permute is volatile asm so that the compiler cannot hoist
    a thread's weights, dequantized, out of the time loop: they would not fit its registers."""
    for k in T.unroll(4):  # result bytes 0-3: w's byte k, then bytes 4, 4, 7 of the second operand (0, 0, 0x4B)
        T.ptx.prmt.b32(wq[k], w, T.uint32(EXPONENT_WORD), T.uint32(0x7440 + k))
