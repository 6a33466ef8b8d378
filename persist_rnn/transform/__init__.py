"""Relax passes: PersistentRNN swaps recurrences for persistent kernels; DenseToProjection runs
dense layers over symbolic rows as the projection GEMM on CUDA, and ConvAsMatmul convolutions
as im2col and a matmul ahead of it; ExactPower keeps `power` right
under TVM's CUDA fast math."""
from .conv_as_matmul import ConvAsMatmul
from .dense_projection import DenseToProjection
from .exact_power import ExactPower
from .persistent_rnn import PersistentRNN

__all__ = ["ConvAsMatmul", "DenseToProjection", "ExactPower", "PersistentRNN"]
