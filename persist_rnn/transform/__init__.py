"""Relax passes: PersistentRNN swaps recurrences for persistent kernels."""
from .persistent_rnn import PersistentRNN

__all__ = ["PersistentRNN"]
