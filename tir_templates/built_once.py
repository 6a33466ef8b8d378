"""Each kernel built once a process: parsing a persistent kernel's TVMScript takes 1-7 seconds
(a batch-bucketed one holds a kernel a bucket), and a model's layers, its batch buckets, the
tuner's candidates and a test suite's models ask for the same (spec, config) again and again.

A PrimFunc is immutable (every change copies it; the cache's own reference makes sure of that),
so one object serves every caller. A builder that raises is not cached: it raises again. Code
that rebinds a template's macros (`benchmarks/step_budget.py`'s ablations) reloads the builder's
module, which gives the reloaded builder a cache of its own; `cache_clear()` empties one.
"""
from __future__ import annotations

import functools

#: kernels kept per builder; a tuning run's candidates stay well below it
KEPT = 256


def _hashable(value):
    """Lists (buckets, a stack's specs) as tuples, so that they can be a cache key."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def built_once(builder):
    """`builder` (returning a PrimFunc from hashable arguments, or lists of them) cached per
    process; `builder.cache_clear()` empties it."""
    cached = functools.lru_cache(maxsize=KEPT)(builder)

    @functools.wraps(builder)
    def build(*args, **kwargs):
        return cached(*map(_hashable, args), **{k: _hashable(v) for k, v in kwargs.items()})

    build.cache_clear = cached.cache_clear
    build.cache_info = cached.cache_info
    return build
