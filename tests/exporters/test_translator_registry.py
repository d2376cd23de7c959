"""The translator registry built for a graph's ops holds what torch.onnx's full one holds.

The oracle is ``ONNXRegistry.from_torchlib()``, what ``torch.onnx.export`` itself builds:
the same ops are translated (so the trace keeps the same ops whole), each op has the
same entries, and every corpus network translates to the same ONNX bytes with either
registry (and takes the fast path with both; one with an op torchlib cannot translate, decomposed
on that path, writes what ``torch.onnx.export`` writes). A change of the private internals these rely on fails here.
"""

from __future__ import annotations

import onnx
import pytest
import torch
import torch.nn.functional as F
from _corpus import CORPUS
from torch import nn

from dcd_deploy.exporters import _registry, _trace
from dcd_deploy.exporters._placeholder import onnx_translation
from dcd_deploy.exporters.lowering import to_deploy
from dcd_deploy.layers import DCDConv2d


@pytest.fixture(scope="module")
def full():
    from torch.onnx._internal.exporter import _registration

    with _trace._quiet_registration():
        registry = _registration.ONNXRegistry.from_torchlib()
    op, translate = onnx_translation()
    registry.register_op(op, translate)
    return registry


def _same(a, b) -> bool:
    return [(m.onnx_function, m.fx_target, m.is_complex, m.is_custom, m.opset_introduced) for m in a] == [
        (m.onnx_function, m.fx_target, m.is_complex, m.is_custom, m.opset_introduced) for m in b
    ]


def test_the_same_ops_are_translated(full):
    from torch.onnx._internal.exporter import _decomp

    op, _ = onnx_translation()
    assert _registry.translated_ops() | {op} == set(_decomp.get_onnx_implemented_overloads(full))
    assert len(full.functions) > 400  # the whole torchlib, not a handful


def test_every_op_has_the_full_registry_s_entries(full):
    subset = _registry.registry_for(_registry.translated_ops(), dict([onnx_translation()]))
    assert subset.functions.keys() == full.functions.keys()
    different = [k for k in full.functions if not _same(full.functions[k], subset.functions[k])]
    assert not different


def test_a_graph_s_registry_holds_only_its_ops():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
    registry = _registry.registry_for(_registry.called_ops(torch.fx.GraphModule(torch.nn.Module(), graph)), {})
    assert list(registry.functions) == ["aten::relu"]
    assert registry.get_decomps(torch.ops.aten.relu.default)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_translates_to_the_same_bytes_with_the_full_registry(name, full, monkeypatch):
    case = CORPUS[name]
    net = case.build()
    example = case.inputs(1)
    deploy = to_deploy(net, strategy="auto", input_size=case.input_size, example_inputs=example)
    kwargs = dict(batch=None, dynamic_size=False, input_names=None, output_names=None)
    subset = _trace.trace(deploy, example, **kwargs)
    monkeypatch.setattr(_trace, "registry_for", lambda ops, custom: full)
    whole = _trace.trace(deploy, example, **kwargs)
    # every network takes the fast path (nonsquare's 3x4 adaptive pool decomposed on it)
    assert subset.fast_path and whole.fast_path
    assert subset.proto.SerializeToString() == whole.proto.SerializeToString()


class UntranslatedPools(nn.Module):
    """Two ops torchlib has no function for, beside a DCD layer: ``adaptive_max_pool2d``
    and a non-global ``adaptive_avg_pool2d`` (3x4 from 6x8, what nonsquare's head does)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.dcd = DCDConv2d(16, 16, 1)
        self.fc = nn.Linear(16 + 16 * 12, 5)

    def forward(self, x):
        x = F.relu(self.dcd(F.relu(self.stem(x))))
        a = F.adaptive_max_pool2d(x, 1).flatten(1)
        b = F.adaptive_avg_pool2d(x, (3, 4)).flatten(1)
        return self.fc(torch.cat([a, b], 1))


def _graph(proto):
    """The graph without its ``metadata_props``: torch.export's range notes differ by path."""
    g = onnx.GraphProto()
    g.CopyFrom(proto.graph)
    del g.metadata_props[:]
    return g.SerializeToString()


def test_ops_without_a_translation_are_decomposed_on_the_fast_path(monkeypatch):
    """The oracle is ``torch.onnx.export`` (the public path): the same graph, node for node."""
    torch.manual_seed(0)
    deploy = to_deploy(UntranslatedPools().eval(), strategy="auto", input_size=(12, 16))
    example = (torch.randn(1, 3, 12, 16),)
    kwargs = dict(batch=None, dynamic_size=False, input_names=None, output_names=None)
    called = []
    decompose = _trace._decompose_untranslated
    monkeypatch.setattr(_trace, "_decompose_untranslated", lambda ep, op: called.append(1) or decompose(ep, op))
    fast = _trace.trace(deploy, example, **kwargs)
    assert fast.fast_path and called

    def refuse(*args):
        raise _trace._Fallback

    monkeypatch.setattr(_trace, "_fast", refuse)
    public = _trace.trace(deploy, example, **kwargs)
    assert not public.fast_path
    ops = [n.op_type for n in fast.proto.graph.node]
    assert "ReduceMax" in ops and not any("adaptive" in op.lower() for op in ops)
    assert _graph(fast.proto) == _graph(public.proto)


LATE_OPS = """
import torch
from torch.onnx._internal.exporter import _decomp, _registration
from dcd_deploy.exporters import _registry, _trace

assert _registration._get_overload("quantized_decomposed::quantize_per_tensor") is None
before = _registry.translated_ops()  # the first export of a session made its registry
torch.compile(torch.nn.Linear(2, 2))  # which registers quantized_decomposed's ops
with _trace._quiet_registration():
    full = _registration.ONNXRegistry.from_torchlib()
late = set(_decomp.get_onnx_implemented_overloads(full)) - before
assert late, "torch.compile registered no op torchlib translates: the test proves nothing"
assert _registry.translated_ops() == set(_decomp.get_onnx_implemented_overloads(full))
subset = _registry.registry_for(_registry.translated_ops(), {})
assert subset.functions.keys() == full.functions.keys()
"""


def test_ops_registered_after_the_first_export_are_translated_as_torch_onnx_would():
    """A notebook exports, then calls torch.compile (which registers quantized_decomposed's
    ops), then exports again: the registry is made again, as from_torchlib would be. In a
    new process, so that nothing imported torch.compile before."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LATE_OPS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
