"""The contract between the compiler and the kernel library: what a recurrent cell computes.

A `CellSpec` is everything a template needs to know about one recurrent layer, independent of
ONNX and Relax. It travels inside the IRModule as a JSON function attribute of the reference
scan, so a pass can rebuild the layer from the module alone.
"""
from __future__ import annotations

import dataclasses
import json

#: gates per cell, in ONNX order: LSTM i,o,f,c; GRU z,r,h; RNN i.
NUM_GATES = {"lstm": 4, "gru": 3, "rnn": 1}
#: activations per direction, in ONNX order: LSTM f,g,h; GRU f,g; RNN f.
NUM_ACTIVATIONS = {"lstm": 3, "gru": 2, "rnn": 1}
DEFAULT_ACTIVATIONS = {
    "lstm": ("Sigmoid", "Tanh", "Tanh"),
    "gru": ("Sigmoid", "Tanh"),
    "rnn": ("Tanh",),
}
#: every activation the ONNX spec lists, with the defaults of (alpha, beta) it consumes.
ACTIVATION_PARAMS = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "Softsign": (),
    "Softplus": (),
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01,),
    "ThresholdedRelu": (1.0,),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0,),
}
ATTR_KEY = "persist_rnn.cell"


@dataclasses.dataclass(frozen=True)
class Activation:
    """One activation function with the alpha/beta it was given (unused ones are 0)."""

    name: str
    alpha: float = 0.0
    beta: float = 0.0


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """One recurrent layer: cell kind, sizes, directions and the ONNX flags that change the math."""

    cell: str  # "lstm" | "gru" | "rnn"
    input_size: int
    hidden_size: int
    direction: str = "forward"  # "forward" | "reverse" | "bidirectional"
    #: per direction, NUM_ACTIVATIONS[cell] activations
    activations: tuple = ()
    clip: float | None = None
    input_forget: bool = False
    linear_before_reset: bool = False
    peepholes: bool = False
    dtype: str = "float32"
    node: str = ""
    #: operands the call site gives once for the whole batch (batch extent 1), of "lens", "h0",
    #: "c0": a symbolic batch's default lengths and zero states, which would otherwise be filled
    #: by a kernel of their own on every call (signature.batch_row)
    batch_broadcast: tuple = ()
    #: the weights are int8 values times their scales (a quantized model's): fp16 holds them to
    #: within an eighth of the int8 step, a rounding below the quantization's own half step
    int8_weights: bool = False
    #: ... and at every call site R is a constant whose rows are int8 values times one scale each,
    #: exactly: a kernel may hold them as int8, R packed by the pass (int8_rows.py)
    int8_rows: bool = False

    def __post_init__(self):
        if not self.activations:
            acts = tuple(Activation(a) for a in DEFAULT_ACTIVATIONS[self.cell])
            object.__setattr__(self, "activations", acts * self.num_directions)

    @property
    def num_gates(self) -> int:
        return NUM_GATES[self.cell]

    @property
    def dtype_bytes(self) -> int:
        return 2 if self.dtype == "float16" else 4

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def is_reverse(self, d: int) -> bool:
        """Whether direction slot `d` walks time backwards."""
        return self.direction == "reverse" or (self.direction == "bidirectional" and d == 1)

    def direction_activations(self, d: int) -> tuple:
        n = NUM_ACTIVATIONS[self.cell]
        return self.activations[d * n : (d + 1) * n]

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        if not d["batch_broadcast"]:
            del d["batch_broadcast"]  # what a spec's JSON was before the field: unchanged where unused
        if not d["int8_weights"]:
            del d["int8_weights"]  # (the same)
        if not d["int8_rows"]:
            del d["int8_rows"]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CellSpec:
        d = json.loads(text)
        d["activations"] = tuple(Activation(**a) for a in d["activations"])
        d["batch_broadcast"] = tuple(d.get("batch_broadcast", ()))
        return cls(**d)
