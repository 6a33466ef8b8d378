"""Relax passes: PersistentRNN swaps recurrences for persistent kernels; ExactPower keeps `power`
right under TVM's CUDA fast math."""
from .exact_power import ExactPower
from .persistent_rnn import PersistentRNN

__all__ = ["ExactPower", "PersistentRNN"]
