"""TVMScript finds the parser a macro expands into with `inspect.getouterframes`, which reads every
frame's source lines. A template's macros expand deep in the parser's recursion (about 230 frames),
so that lookup took 185 of the 210 s that building the char-RNN's CUDA took on two cores
(docs/design.md, *Parsing the templates*). `install()` gives ScriptMacro the same lookup as a plain
walk up `f_back`: the first frame whose globals hold the parser, as before, without the lines."""
from __future__ import annotations

import hashlib
import inspect
import sys

from tvm.script.parser.core.parser import ScriptMacro

#: the source digest of the lookup this replaces, in the pinned TVM (apache-tvm 0.27.0.post1);
#: another TVM keeps its own lookup
_REPLACED = "4114f30b"


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


def install() -> bool:
    """Replace the lookup where it is the one measured; True where the walk is in place."""
    current = ScriptMacro._find_parser_def
    if current is _find_parser_def:
        return True
    if _digest(current) != _REPLACED:
        return False
    ScriptMacro._find_parser_def = _find_parser_def
    return True
