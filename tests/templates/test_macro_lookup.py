"""tir_templates.macro_lookup: TVMScript's macros find their parser by a frame walk in the pinned
TVM and parse their definition once, expand as before, and another TVM's lookup is left alone."""
from __future__ import annotations

import tvm
from tvm.script import tirx as T
from tvm.script.parser.core.parser import ScriptMacro

import tir_templates  # noqa: F401  (installs the lookup)
from tir_templates import macro_lookup


def test_the_pinned_lookups_are_replaced():
    assert ScriptMacro._find_parser_def is macro_lookup._find_parser_def
    assert ScriptMacro.get_macro_def is macro_lookup.get_macro_def
    assert macro_lookup.install()


def test_a_macro_is_parsed_once_however_often_it_expands(monkeypatch):
    parsed = []

    def counted(macro):
        parsed.append(macro)
        return macro_lookup_original(macro)

    macro_lookup_original = macro_lookup._GET_MACRO_DEF
    monkeypatch.setattr(macro_lookup, "_GET_MACRO_DEF", counted)

    @T.macro
    def add_one(a, i):
        a[i] = a[i] + T.float32(1)

    @T.prim_func(private=True)
    def kernel(a: T.Buffer((4,), "float32")):
        for i in range(4):
            add_one(a, i)
            add_one(a, i)

    assert len(parsed) == 1 and str(kernel).count("+ T.float32(1.0)") == 2


def test_a_macro_expands_through_the_walk():
    @T.macro
    def twice(a, i):
        a[i] = a[i] * T.float32(2)

    @T.prim_func(private=True)
    def kernel(a: T.Buffer((4,), "float32")):
        for i in range(4):
            twice(a, i)

    store = kernel.body.body
    assert isinstance(store, tvm.tirx.BufferStore) and "2.0" in str(store.value)


def test_another_lookup_is_left_alone(monkeypatch):
    def other_lookup(self):
        raise AssertionError("not called")

    monkeypatch.setattr(ScriptMacro, "_find_parser_def", other_lookup)
    assert not macro_lookup.install()
    assert ScriptMacro._find_parser_def is other_lookup
