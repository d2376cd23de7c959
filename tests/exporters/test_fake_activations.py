"""The activations' fake shapes during the trace come from a shape function, not a decomposition.

Oracles: torch's own decomposition of each op on the same symbolic fake tensors (shape,
strides, dtype of the output), a count of the decomposition's calls (none where the
shape function answers, some where it must not), and the same export without the shape
functions (the same ONNX graph, byte for byte).
"""

from __future__ import annotations

import contextlib

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._decomp import decomposition_table
from torch._subclasses.fake_impls import get_fast_op_impls
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from dcd_deploy import export_onnx
from dcd_deploy.exporters import _fake_activations, _trace
from dcd_deploy.layers import DCDConv2d

aten = torch.ops.aten

#: Each listed ATen activation with arguments after the input.
CALLS = {
    "relu.default": (),
    "relu6.default": (),
    "hardtanh.default": (-0.5, 2.0),
    "hardswish.default": (),
    "hardsigmoid.default": (),
    "leaky_relu.default": (0.2,),
    "elu.default": (0.7, 1.0, 1.0),
    "celu.default": (0.9,),
    "selu.default": (),
    "gelu.default": (),
    "mish.default": (),
    "softplus.default": (2.0, 10.0),
    "threshold.default": (0.1, -1.0),
}


def _op(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet), overload)


def _symbolic(mode: FakeTensorMode, t: torch.Tensor) -> torch.Tensor:
    """A fake copy of ``t`` with every size symbolic (as the exported batch is)."""
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=context)


#: Inputs: (what, tensor, whether the shape function answers it)
INPUTS = {
    "contiguous": (lambda: torch.randn(2, 3, 5, 4), True),
    "channels-last": (lambda: torch.randn(2, 3, 5, 4).to(memory_format=torch.channels_last), True),
    "float64 matrix": (lambda: torch.randn(3, 7, dtype=torch.float64), True),
    "transposed view": (lambda: torch.randn(2, 3, 5, 4).transpose(1, 3), False),
}


def _fake_call(mode: FakeTensorMode, op, *args):
    """``op`` as the trace hands it to the fake tensors: whole, even where it is a
    composite (relu6, selu) the trace keeps whole because the translator writes it so."""
    with mode:
        return mode.dispatch(op, (), args, {})


def test_every_listed_activation_is_tested_and_decomposed_by_torch():
    assert set(CALLS) == set(_fake_activations.ACTIVATIONS)
    for name in CALLS:
        assert _op(name) in decomposition_table, name  # else the entry does nothing


def _counting(monkeypatch, op) -> list:
    calls = []
    original = decomposition_table[op]

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setitem(decomposition_table, op, counted)
    return calls


@pytest.mark.parametrize("what", list(INPUTS))
@pytest.mark.parametrize("name", list(CALLS))
def test_shape_function_gives_what_the_decomposition_gives(monkeypatch, name, what):
    op, args = _op(name), CALLS[name]
    make, answered = INPUTS[what]
    real = make()
    calls = _counting(monkeypatch, op)

    mode = FakeTensorMode(shape_env=ShapeEnv())
    want = _fake_call(mode, op, _symbolic(mode, real), *args)  # torch's own path: the decomposition
    assert calls, "the decomposition is not what torch runs here"
    calls.clear()

    mode = FakeTensorMode(shape_env=ShapeEnv())  # the same symbols, made the same way
    x = _symbolic(mode, real)
    with _fake_activations.fast_activations():
        got = _fake_call(mode, op, x, *args)
    assert bool(calls) != answered  # answered by the shape function, or handed to the decomposition
    assert (got.dtype, got.device) == (want.dtype, want.device) == (op(real, *args).dtype, real.device)
    assert [str(s) for s in got.shape] == [str(s) for s in want.shape] == [str(s) for s in x.shape]
    assert [str(s) for s in got.stride()] == [str(s) for s in want.stride()]


def test_an_integer_input_goes_to_the_decomposition(monkeypatch):
    calls = _counting(monkeypatch, aten.relu.default)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    with _fake_activations.fast_activations():
        got = _fake_call(mode, aten.relu.default, _symbolic(mode, torch.arange(12).reshape(3, 4)))
    assert calls and got.dtype == torch.int64


def test_the_table_is_restored_after_the_block_even_on_an_error():
    table = get_fast_op_impls()
    before = dict(table)
    with pytest.raises(RuntimeError, match="boom"), _fake_activations.fast_activations():
        assert aten.hardtanh.default in table and aten.relu.default in table
        assert table[aten.add.Tensor] is before[aten.add.Tensor]  # torch's own entries untouched
        raise RuntimeError("boom")
    assert table == before


class Activations(nn.Module):
    """Every listed activation as users call them, functional and module, one after the other."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, 2, 1)
        self.dcd = DCDConv2d(6, 8)
        self.mods = nn.Sequential(nn.ReLU6(), nn.Hardswish(), nn.Hardtanh(-2.0, 3.0), nn.GELU(), nn.Softplus(beta=2.0))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = F.relu(self.stem(x))
        y = self.mods(self.dcd(y))
        y = F.leaky_relu(F.elu(y, 0.7), 0.2) + F.hardsigmoid(y) + F.celu(y, 0.9) + F.selu(y)
        y = F.mish(F.threshold(y, 0.1, -1.0)) + F.relu6(y.transpose(2, 3)).transpose(2, 3)
        return self.head(y.mean((2, 3)))


def test_export_uses_the_shape_functions_and_writes_the_same_graph(tmp_path, monkeypatch):
    torch.manual_seed(4)
    net = Activations().eval()
    calls = _counting(monkeypatch, aten.hardswish.default)
    fast = export_onnx(net, tmp_path / "fast.onnx", input_size=(18, 26), simplify=False)
    assert fast.parity and not calls  # hardswish's shape came from the shape function

    monkeypatch.setattr(_trace, "fast_activations", contextlib.nullcontext)
    plain = export_onnx(net, tmp_path / "plain.onnx", input_size=(18, 26), simplify=False, check=False)
    assert calls  # without them torch decomposes it
    graph = onnx.load(str(fast.path)).graph
    assert graph.SerializeToString() == onnx.load(str(plain.path)).graph.SerializeToString()
    assert {"Relu", "Clip", "HardSwish", "Erf", "Softplus", "LeakyRelu", "Elu", "Selu"} <= {  # Gelu: Erf at opset 18
        n.op_type for n in graph.node
    }
