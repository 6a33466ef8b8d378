"""TVMScript finds the parser a macro expands into with `inspect.getouterframes`, which reads every
frame's source lines. A template's macros expand deep in the parser's recursion (about 230 frames),
so that lookup took 185 of the 210 s that building the char-RNN's CUDA took on two cores
(docs/design.md, *Build time: parsing the templates*). `install()` gives ScriptMacro the same
lookup as a plain walk up `f_back`: the first frame whose globals hold the parser, as before,
without the lines; and it keeps each macro's parsed definition, which TVMScript parsed from the
macro's source again at every expansion (2.3 s of the 19 left)."""
from __future__ import annotations

import hashlib
import inspect
import sys

from tvm.script.parser.core.parser import ScriptMacro

#: the source digest of the lookup this replaces, in the pinned TVM (apache-tvm 0.27.0.post1);
#: another TVM keeps its own lookup
_REPLACED = {"_find_parser_def": "4114f30b", "get_macro_def": "a8019814"}


def _digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:8]


def _find_parser_def(self):
    """The parser the macro expands into: the nearest caller whose globals name it."""
    frame = sys._getframe(1)
    while frame is not None:
        parser = frame.f_globals.get(ScriptMacro.parser_object_name)
        if parser is not None:
            return parser
        frame = frame.f_back
    raise RuntimeError(f"{ScriptMacro.parser_object_name} not available")


def get_macro_def(self):
    """The macro's definition (a doc FunctionDef), parsed from its source once."""
    found = self.__dict__.get("_persist_rnn_macro_def")
    if found is None:
        found = self.__dict__["_persist_rnn_macro_def"] = _GET_MACRO_DEF(self)
    return found


_GET_MACRO_DEF = ScriptMacro.get_macro_def
_OURS = {"_find_parser_def": _find_parser_def, "get_macro_def": get_macro_def}


def install() -> bool:
    """Replace the lookups where they are the ones measured; True where both are ours."""
    for name, ours in _OURS.items():
        current = getattr(ScriptMacro, name)
        if current is not ours and _digest(current) == _REPLACED[name]:
            setattr(ScriptMacro, name, ours)
    return all(getattr(ScriptMacro, name) is ours for name, ours in _OURS.items())
