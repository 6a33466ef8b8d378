"""Relax passes: PersistentRNN swaps recurrences for persistent kernels; DenseToProjection runs
dense layers over symbolic rows as the projection GEMM on CUDA; ExactPower keeps `power` right
under TVM's CUDA fast math."""
from .dense_projection import DenseToProjection
from .exact_power import ExactPower
from .persistent_rnn import PersistentRNN

__all__ = ["DenseToProjection", "ExactPower", "PersistentRNN"]
