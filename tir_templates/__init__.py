"""TIR kernel templates for recurrent cells: the reference scan and the persistent kernels.

Knows TVM's TIR and nothing of ONNX or Relax. Contract: `CellSpec` (what a layer computes),
`Config` (how the persistent kernel is tiled and mapped) and the one signature every recurrence
kernel has (`signature.py`).
"""
from . import macro_lookup

macro_lookup.install()  # before any template is parsed

from .reference import reference_scan
from .spec import ATTR_KEY, Activation, CellSpec

__all__ = ["ATTR_KEY", "Activation", "CellSpec", "reference_scan"]
