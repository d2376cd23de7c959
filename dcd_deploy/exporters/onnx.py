"""ONNX export of the deploy form: a small graph of standard ops, parity-checked.

The deploy module (:func:`~dcd_deploy.exporters.to_deploy`) is traced with torch.fx
and each node is emitted directly as ONNX, so the graph holds exactly the ops chosen
here: no TorchScript round trip, no BatchNorm, no per-sample kernels inside a Conv, no
batch baked into a Reshape (shapes use 0 = "copy the batch").

``mode="function"`` wraps every DCD layer in one node of domain ``dcd_deploy``
defined as a model-local function whose body is the same standard ops.
``mode="fused"`` writes what a fused kernel runs: one channels-last
``dcd_deploy.DCDPointwise`` node per 1x1 DCD layer with its residual add and activation
(:mod:`~dcd_deploy.exporters._fused`), also with a standard-op body.
"""

from __future__ import annotations

import json
import operator
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import onnx
import torch
from onnx import TensorProto, helper
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from .._version import __version__
from .._atomic import atomic_output, check_output_path
from ..errors import ExportError, ParityError
from . import _fused
from ._builder import DOMAIN, DOMAIN_VERSION, FunctionScope, GraphBuilder, Scope
from ._deploy_dcd import STRATEGIES, DeployDCD, adaptive_windows
from ._fold import bn_affine
from .lowering import to_deploy

DEFAULT_OPSET = 17
MIN_OPSET = 13  # Unsqueeze/ReduceSum take axes as inputs from 13 on
MODES = ("standard", "function", "fused")
#: Version of the layout of :meth:`ExportResult.to_dict` (``dcd-export --json``).
EXPORT_SCHEMA = "dcd-export.report/1"
#: Ops an exported graph may contain (docs/design.md#deploy-form).
ALLOWED_OPS = frozenset({
    "Conv", "Gemm", "MatMul", "Mul", "Add", "Sub", "Div", "Relu", "Clip", "HardSigmoid", "Sigmoid",
    "Softmax", "AveragePool", "GlobalAveragePool", "ReduceMean", "ReduceSum", "MaxPool", "Reshape",
    "Flatten", "Transpose", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Shape", "Gather",
    "Expand", "Identity", "Constant",
})


@dataclass
class ExportResult:
    """What :func:`export_onnx` wrote.

    Truthy when the file was written and parity (if checked) passed.
    """

    path: Path
    arch: str
    input_size: int
    batch: int | None
    opset: int
    mode: str
    num_nodes: int
    op_histogram: dict[str, int]
    size_bytes: int
    seconds: float
    simplified: bool
    strategies: dict[str, str] = field(default_factory=dict)
    parity: object | None = None  # ParityReport

    def __bool__(self) -> bool:
        return self.parity is None or bool(self.parity)

    def to_dict(self) -> dict:
        """The JSON document of ``dcd-export --json`` (schema :data:`EXPORT_SCHEMA`)."""
        d = {"schema": EXPORT_SCHEMA, "version": __version__}
        d.update((k, v) for k, v in self.__dict__.items() if k != "parity")
        d["path"] = d["onnx_path"] = str(self.path)
        d["parity"] = self.parity.to_dict() if self.parity is not None else None
        return d


def export_onnx(model: nn.Module, path, *, input_size: int = 224, batch: int | None = None,
                opset: int | None = None, simplify: bool = True, mode: str = "standard",
                check: bool = True, strategy: str = "auto", parity_batch_sizes=(1, 2),
                parity_inputs: torch.Tensor | None = None,
                progress: Callable[[str], None] | None = None, accept_inconclusive: bool = False,
                parity_preprocess=None, parity_inputs_description: str | None = None) -> ExportResult:
    """Export ``model`` to ONNX in deploy form; the file appears only if all succeeded.

    Args:
        model: a zoo model or checkpoint-loaded model (not modified).
        path: output ``.onnx`` path; its directory must exist.
        input_size: square input side.
        batch: fixed batch size, or None for a dynamic batch axis.
        opset: default-domain opset, 13 up to the installed onnx's newest (default 17).
        simplify: run onnxsim on the graph and keep its result if its own numeric check
            passes (standard mode; onnxsim would inline the functions of function mode).
        mode: ``standard``, ``function`` (one ``dcd_deploy`` node per DCD layer) or
            ``fused`` (channels-last ``DCDPointwise`` nodes for a fused kernel, e.g.
            :func:`dcd_deploy.openvino_extension`; not simplified either).
        check: compare against PyTorch with :func:`~dcd_deploy.check_parity`; a failure
            raises :class:`ParityError` and writes nothing. A ``fused`` file is checked in
            ONNX Runtime (its function bodies) and, when openvino is installed, in OpenVINO
            with the fused kernels.
        strategy: DCD layer form, ``latent``, ``weight`` or ``auto``.
        parity_batch_sizes: batch sizes the parity check runs (a fixed ``batch`` overrides).
        parity_inputs: the check's inputs, (N, 3, input_size, input_size), instead of the
            built-in synthetic images (see :func:`~dcd_deploy.check_parity`).
        progress: called with one line per finished stage (``[lower] 0.4 s``, ``[emit]``,
            ``[simplify]``, ``[write]``, ``[check]``).
        accept_inconclusive: let the check pass when its end-to-end comparison is
            inconclusive and no dynamic layer decided it (see :class:`~dcd_deploy.parity.ParityReport`).
        parity_preprocess: the model's preprocessing for the check's built-in images
            (:class:`~dcd_deploy.preprocess.Preprocess` or a preset name).
        parity_inputs_description: what ``parity_inputs`` are, for the file's metadata.

    Raises:
        ExportError: bad arguments, an unwritable path, or a layer that cannot be lowered.
        ParityError: ONNX Runtime disagrees with PyTorch beyond tolerance, or
            (:class:`~dcd_deploy.errors.NonFiniteOutputError`) the model itself outputs
            NaN or Inf on finite inputs.
    """
    start = time.perf_counter()
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ExportError(f"opset {opset} is not supported; use {MIN_OPSET}-{onnx.defs.onnx_opset_version()}")
    if mode not in MODES:
        raise ExportError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if strategy not in STRATEGIES:
        raise ExportError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if not isinstance(input_size, int) or input_size < 1:
        raise ExportError(f"input size must be a positive integer, not {input_size!r}")
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise ExportError(f"batch must be a positive integer or None (dynamic), not {batch!r}")
    path = Path(path)
    check_output_path(path, error=ExportError)

    stage = _Stages(progress)
    deploy = to_deploy(model, strategy=strategy, input_size=input_size)
    stage("lower")
    proto = build_onnx(deploy, input_size=input_size, batch=batch, opset=opset, mode=mode,
                       arch=getattr(model, "arch", type(model).__name__))
    stage("emit")
    simplified = False
    if simplify and mode == "standard":
        proto, simplified = _simplify_keeping_layers(proto)
        stage("simplify")
    bad = sorted({n.op_type for n in proto.graph.node if n.domain in ("", "ai.onnx")} - ALLOWED_OPS)
    if bad:  # a lowering bug, not a user error
        raise AssertionError(f"exported graph contains disallowed ops: {bad}")

    if check:
        _record_parity_inputs(proto, parity_inputs, parity_inputs_description, parity_preprocess)
    with atomic_output(path, error=ExportError) as tmp:
        onnx.save(proto, tmp)
        # The checker reads the written file: what the user gets, and about 3x faster on big
        # models than checking the in-memory proto (which serializes it a second time).
        onnx.checker.check_model(str(tmp), full_check=True)
        stage("write")
        report = None
        if check:
            from ..parity import check_parity

            sizes = (batch,) if batch is not None else tuple(parity_batch_sizes)
            report = check_parity(model, tmp, batch_sizes=sizes, inputs=parity_inputs,
                                  backends=_parity_backends(mode), accept_inconclusive=accept_inconclusive,
                                  preprocess=parity_preprocess)
            report.onnx_path = str(path)  # the file the user gets, not its temporary name
            stage("check")
            if not report:
                raise ParityError(f"parity check {'inconclusive' if report.verdict == 'INCONCLUSIVE' else 'failed'}: "
                                  f"{report.summary()}", report)
    hist = Counter(_op_name(n) for n in proto.graph.node)
    return ExportResult(
        path=path, arch=getattr(model, "arch", type(model).__name__), input_size=input_size, batch=batch,
        opset=opset, mode=mode, num_nodes=len(proto.graph.node), op_histogram=dict(hist.most_common()),
        size_bytes=path.stat().st_size, seconds=time.perf_counter() - start, simplified=simplified,
        strategies=dict(getattr(deploy, "strategies", {})), parity=report)


def _parity_backends(mode: str) -> tuple[str, ...]:
    import importlib.util

    if mode == "fused" and importlib.util.find_spec("openvino") is not None:
        return ("onnxruntime", "openvino")
    return ("onnxruntime",)


class _Stages:
    """Reports each finished stage of an export with its own duration."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.progress, self.last = progress, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        if self.progress is not None:
            self.progress(f"[{name}] {now - self.last:.1f} s")
        self.last = now


def _op_name(node: onnx.NodeProto) -> str:
    """Histogram key: the op type, or ``domain.Function`` without the per-shape suffix."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type
    return f"{node.domain}.{node.op_type.rsplit('_', 1)[0] if node.domain == DOMAIN else node.op_type}"


def _simplify(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """onnxsim, kept only if its own numeric check passes."""
    import contextlib
    import io

    import onnxsim

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            simplified, ok = onnxsim.simplify(proto, check_n=1)
    except Exception:  # onnxsim failing is not the user's problem: keep the unsimplified graph
        return proto, False
    return (simplified, True) if ok else (proto, False)


def build_onnx(deploy: torch.fx.GraphModule, *, input_size: int, batch: int | None, opset: int,
               mode: str, arch: str = "model") -> onnx.ModelProto:
    """Emit a deploy-form GraphModule as an ONNX model (no simplification, no checks)."""
    with torch.no_grad():
        ShapeProp(deploy).propagate(torch.zeros(1, 3, input_size, input_size))
    g = GraphBuilder(opset)
    modules = dict(deploy.named_modules())
    env: dict[str, str] = {}
    inputs, outputs = [], []
    fused, folded = _fused.plan(deploy) if mode == "fused" else ({}, set())
    layout = _fused.Layout(g)
    layers: list[dict] = []
    for node in deploy.graph.nodes:
        if node.name in folded:  # emitted with its fused tail
            continue
        if node.name in fused:
            spec = fused[node.name]
            src = spec.dcd.args[0]
            env[node.name] = _fused.emit(
                g, layout, modules[spec.dcd.target], spec, _path(spec.dcd), env[src.name],
                env[spec.residual.name] if spec.residual is not None else None, _shape(src))
            _record_layer(layers, deploy, spec.dcd, modules, layout.nhwc[env[src.name]],
                          layout.nhwc[env[node.name]], spec=spec,
                          residual=layout.nhwc[env[spec.residual.name]] if spec.residual is not None else None)
        elif node.op == "placeholder":
            env[node.name] = "input"
            inputs.append(helper.make_tensor_value_info(
                "input", TensorProto.FLOAT, [batch or "batch", 3, input_size, input_size]))
        elif node.op == "output":
            src = node.args[0]
            if not isinstance(src, torch.fx.Node):
                raise ExportError("models with several outputs are not supported")
            n_out = src.meta["tensor_meta"].shape[1:]
            outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch or "batch", *n_out]))
            g.nodes.append(helper.make_node("Identity", [env[src.name]], ["logits"], name="output/Identity"))
        else:
            env[node.name] = _emit_node(g, node, modules, env, mode)
            if node.op == "call_module" and isinstance(node.args[0], torch.fx.Node):
                _record_layer(layers, deploy, node, modules, env[node.args[0].name], env[node.name])
    graph = helper.make_graph(g.nodes, "dcd_deploy", inputs, outputs, g.initializers)
    imports = [helper.make_opsetid("", opset)]
    if g.functions:
        imports.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    proto = helper.make_model(graph, opset_imports=imports, producer_name="dcd-deploy",
                              producer_version=__version__, functions=list(g.functions.values()))
    proto.ir_version = min(proto.ir_version, 10)  # readable by ONNX Runtime releases of the last years
    helper.set_model_props(proto, {
        "arch": arch, "input_size": str(input_size), "batch": str(batch or "dynamic"),
        "dcd_deploy_version": __version__, "mode": mode,
        "strategies": ",".join(f"{k}={v}" for k, v in getattr(deploy, "strategies", {}).items()),
        LAYERS_KEY: json.dumps(layers),
    })
    return proto


#: metadata_props key of the layer record the layer-wise parity check reads
#: (dcd_deploy/parity/_layerwise.py documents the entries).
LAYERS_KEY = "dcd_deploy.layers"


def _record_parity_inputs(proto, inputs, description, preprocess) -> None:
    """Metadata ``dcd_deploy.parity_inputs``: what the export's parity check ran on."""
    from ..preprocess import make_preprocess

    if inputs is None:
        text = f"built-in natural images, preprocessed: {make_preprocess(preprocess).describe()}"
    else:
        text = description or f"caller's inputs, {' x '.join(map(str, inputs.shape))}, taken as preprocessed"
    entry = proto.metadata_props.add()
    entry.key, entry.value = "dcd_deploy.parity_inputs", text


def _simplify_keeping_layers(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """onnxsim, keeping every tensor the layer record names: they are graph outputs while
    it runs (else it may fold a layer's Reshape/Unsqueeze boundary away), removed after.
    A tensor that only feeds the final Identity takes the graph output's name instead
    (onnxsim folds that Identity)."""
    props = {p.key: p for p in proto.metadata_props}
    if LAYERS_KEY not in props:
        return _simplify(proto)
    layers = json.loads(props[LAYERS_KEY].value)
    outputs = {o.name for o in proto.graph.output}
    identity = {n.input[0]: n.output[0] for n in proto.graph.node if n.op_type == "Identity"}
    keep = [t for t in dict.fromkeys(layer[k] for layer in layers for k in ("input", "output", "residual"))
            if t and t not in outputs and identity.get(t) not in outputs and t != "input"]
    n = len(proto.graph.output)
    try:  # onnxsim needs each output's shape
        known = {v.name: v for v in onnx.shape_inference.infer_shapes(proto).graph.value_info}
    except Exception:  # onnx's inference failing is no reason to skip simplification
        known = {}
    if not all(t in known for t in keep):
        return _simplify(proto)  # not all layer tensors keepable: the check reports any it misses
    work = onnx.ModelProto()
    work.CopyFrom(proto)
    work.graph.output.extend(known[t] for t in keep)
    after, simplified = _simplify(work)
    if not simplified:
        return proto, False
    del after.graph.output[n:]
    for layer in layers:
        for key in ("input", "output", "residual"):
            if identity.get(layer[key]) in outputs:
                layer[key] = identity[layer[key]]
    next(p for p in after.metadata_props if p.key == LAYERS_KEY).value = json.dumps(layers)
    return after, True


def _record_layer(layers: list, deploy, node, modules, x: str, y: str, *, spec=None, residual=None) -> None:
    """Append the layer record of one emitted Conv, Linear or dynamic layer (others: nothing)."""
    from ._deploy_mixture import DeployMixture

    mod = modules[node.target]
    if isinstance(mod, DeployDCD):
        kind, form = "DCD", mod.strategy
    elif isinstance(mod, DeployMixture):
        kind, form = ("DYConv" if mod.routing == "softmax" else "CondConv"), None
    elif isinstance(mod, (nn.Conv2d, nn.Linear)):
        kind, form = ("Conv" if isinstance(mod, nn.Conv2d) else "Linear"), None
    else:
        return
    path = str(node.target)
    layers.append({"path": path, "kind": kind, "form": form, "input": x, "output": y,
                   "bn": getattr(deploy, "folded_bn", {}).get(path), "residual": residual,
                   "activation": spec.activation if spec is not None else "none",
                   "layout": "NHWC" if spec is not None else "NCHW"})


def _shape(node) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    if meta is None:
        raise ExportError(f"no shape known for {node}")
    return tuple(meta.shape)


def _path(node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    return next(reversed(stack.values()))[0] if stack else node.name


def _emit_node(g: GraphBuilder, node: torch.fx.Node, modules, env, mode: str) -> str:
    args = [env[a.name] if isinstance(a, torch.fx.Node) else a for a in node.args]
    s = g.scope(_path(node))
    if node.op == "call_module":
        mod = modules[node.target]
        in_shape, out_shape = _shape(node.args[0]), _shape(node)
        if mode == "function" and isinstance(mod, DeployDCD):
            fs = FunctionScope(g, s.path, args[0])
            out = mod.emit(fs, "x", in_shape, out_shape)
            return fs.finish(out, kind=f"DCD{mod.kind.capitalize()}{mod.strategy.capitalize()}")
        if callable(getattr(mod, "emit", None)):  # deploy layers (and bench variants) emit themselves
            return mod.emit(s, args[0], in_shape, out_shape)
        return _emit_module(s, mod, args[0], in_shape, out_shape, node.target)
    if node.op == "call_function" and node.target in (operator.add, torch.add) and len(args) == 2:
        return s.op("Add", args)
    if node.op == "call_function" and node.target is operator.mul and len(args) == 2:
        return s.op("Mul", args)
    if node.op == "call_function" and node.target is torch.relu:
        return s.op("Relu", args)
    if (node.op == "call_function" and node.target is torch.flatten) or (
            node.op == "call_method" and node.target == "flatten"):
        start = args[1] if len(args) > 1 else node.kwargs.get("start_dim", 0)
        end = args[2] if len(args) > 2 else node.kwargs.get("end_dim", -1)
        if end != -1 or start < 1:
            raise ExportError(f"{s.path}: flatten({start}, {end}) cannot be exported")
        return s.op("Flatten", [args[0]], axis=int(start))
    if node.op == "call_method" and node.target == "unsqueeze":
        return s.op("Unsqueeze", [args[0], s.ints("axes", [args[1]])])
    what = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
    raise ExportError(f"cannot export operation {what!r} ({node.op}) in {s.path}")


def _emit_module(s: Scope, mod: nn.Module, x: str, in_shape, out_shape, path: str) -> str:
    if isinstance(mod, nn.Conv2d):
        if mod.padding_mode != "zeros" or isinstance(mod.padding, str):
            raise ExportError(f"{path}: Conv2d padding {mod.padding!r}/{mod.padding_mode} is not supported")
        inputs = [x, s.const("weight", mod.weight)] + ([s.const("bias", mod.bias)] if mod.bias is not None else [])
        ph, pw = mod.padding
        return s.op("Conv", inputs, kernel_shape=list(mod.kernel_size), strides=list(mod.stride),
                    pads=[ph, pw, ph, pw], dilations=list(mod.dilation), group=mod.groups)
    if isinstance(mod, nn.Linear):
        inputs = [x, s.const("weight", mod.weight)] + ([s.const("bias", mod.bias)] if mod.bias is not None else [])
        return s.op("Gemm", inputs, transB=1)
    if isinstance(mod, nn.ReLU):
        return s.op("Relu", [x])
    if isinstance(mod, nn.ReLU6):
        return s.op("Clip", [x, s.const("min", 0.0), s.const("max", 6.0)])
    if isinstance(mod, nn.Hardsigmoid):
        return s.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)
    if isinstance(mod, nn.Sigmoid):
        return s.op("Sigmoid", [x])
    if isinstance(mod, (nn.Identity, nn.Dropout)):
        return x
    if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):  # one that had no conv to fold into
        scale, shift = bn_affine(mod, mod.num_features)
        shape = (-1,) + (1,) * (len(in_shape) - 2)
        return s.op("Add", [s.op("Mul", [x, s.const("scale", scale.view(shape))]), s.const("shift", shift.view(shape))])
    if isinstance(mod, nn.MaxPool2d):
        k, st, p = (_pair(v) for v in (mod.kernel_size, mod.stride, mod.padding))
        if _pair(mod.dilation) != (1, 1):
            raise ExportError(f"{path}: dilated MaxPool2d is not supported")
        return s.op("MaxPool", [x], kernel_shape=list(k), strides=list(st), pads=[*p, *p],
                    ceil_mode=int(mod.ceil_mode))
    if isinstance(mod, nn.AvgPool2d):
        k, st, p = (_pair(v) for v in (mod.kernel_size, mod.stride or mod.kernel_size, mod.padding))
        if mod.divisor_override:
            raise ExportError(f"{path}: AvgPool2d divisor_override is not supported")
        return s.op("AveragePool", [x], kernel_shape=list(k), strides=list(st), pads=[*p, *p],
                    ceil_mode=int(mod.ceil_mode), count_include_pad=int(mod.count_include_pad))
    if isinstance(mod, nn.AdaptiveAvgPool2d):
        oh, ow = out_shape[2], out_shape[3]
        if (oh, ow) == (1, 1):
            return s.op("GlobalAveragePool", [x])
        wins = [adaptive_windows(n, o) for n, o in ((in_shape[2], oh), (in_shape[3], ow))]
        if None in wins:
            raise ExportError(f"{path}: adaptive pool {in_shape[2:]} -> {(oh, ow)} has uneven windows")
        return s.op("AveragePool", [x], kernel_shape=[w[0] for w in wins], strides=[w[1] for w in wins])
    raise ExportError(f"cannot lower layer {path} of type {type(mod).__name__}")


def _pair(v) -> tuple[int, int]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


__all__ = ["ALLOWED_OPS", "ExportResult", "build_onnx", "export_onnx"]
