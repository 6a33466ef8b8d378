"""The precision a build may compute an fp32 layer's recurrent step in.

"fp32" (the default) keeps fp32 accuracy: FMA units, or the tensor cores as 3xTF32. "tf32" also
allows the tensor cores at TF32 precision (one mma of operands rounded to 10 mantissa bits), as
`torch.backends.cudnn.allow_tf32` allows cuDNN; a user asks for it, it is never assumed. fp16 and
bf16 layers are computed at their own precision either way. The input projection runs on the
tensor cores where they beat the fp32 FMA GEMM (`projection_mma.tensor_cores_pay`), at the build's
precision (3xTF32, or TF32 in a tf32 build).
"""
from __future__ import annotations

from tir_templates.config import Config
from tir_templates.spec import CellSpec

from ..errors import PersistRNNError

PRECISIONS = ("fp32", "tf32")
#: the largest error against ONNX Runtime (relative to the output scale) each precision is held to:
#: fp32, the product's standard; TF32 keeps fp16's 10 mantissa bits and rounds each operand once,
#: accumulating in fp32, so it gets fp16's bound (2e-3). A numpy model of an LSTM (T=100, H=64-1024,
#: B=1 and 10, operands rounded as cvt.rna rounds them) erred by at most 2.2e-4: 9x headroom.
TOLERANCE = {"fp32": 1e-4, "tf32": 2e-3}
#: a quantized layer's bound (`CellSpec.int8_weights`), against ONNX Runtime running the fp32 LSTM
#: its int8 weights stand for: the planner may hold them in fp16, which rounds each by at most 2^-11
#: of itself (an eighth of the int8 step at |q - zero_point| = 255), and on CUDA x and, on the tensor
#: cores, h(t-1) are rounded to fp16 too (ONNX Runtime's own kernel rounds them to 8 bits). A numpy
#: LSTM (T=100, H=256-2048, int8 per tensor and per channel, weights and h in fp16) erred by at most
#: 1.02e-4: 10x headroom; the H200's layers 5.4e-4 at most (docs/data/quantized-layers-h200.jsonl, run E).
INT8_WEIGHTS_TOLERANCE = 1e-3


def checked(precision: str) -> str:
    """`precision`, or a clear error naming the choices."""
    if precision not in PRECISIONS:
        raise PersistRNNError(f"precision {precision!r}: one of {', '.join(map(repr, PRECISIONS))} (fp32 layers; "
                              "fp16 and bf16 layers run at their own precision)")
    return precision


def mma_precisions(spec: CellSpec, precision: str) -> tuple[str, ...]:
    """The tensor cores' precisions the space offers for `spec` in a build at `precision`."""
    return ("3xtf32", "tf32") if precision == "tf32" and spec.dtype == "float32" else ("3xtf32",)


def precision_problem(cfg: Config, precision: str) -> str:
    """Why `cfg` may not run in a build at `precision` (empty when it may): a TF32 step in an
    fp32 build would quietly lose accuracy the user did not give up."""
    if cfg.tf32() and precision != "tf32":
        return ("its dot products run at TF32 precision (mma_precision 'tf32'), and this build is at "
                f"precision {precision!r}: compile with precision='tf32' (CLI --precision tf32) to allow it")
    return ""
