"""ONNX export of any model with dynamic layers: PyTorch's exporter plus our layers.

1. :func:`~dcd_deploy.exporters.to_deploy` lowers the model: dynamic layers to
   :class:`DeployDCD` / :class:`DeployMixture` (cost model, BNs folded), BNs after
   convolutions folded too.
2. ``torch.export`` traces it with each dynamic layer as one placeholder op and
   ``torch.onnx``'s translator writes every other op (:mod:`._trace`): whatever standard
   op the model uses (activations, pools, cat, interpolate, LayerNorm, several inputs,
   tuple or dict outputs) is PyTorch's business.
3. Each placeholder is replaced by our emission (:mod:`._emit`): standard ops
   (``mode="standard"``, then onnxsim), one ``dcd_deploy`` function node per DCD layer
   (``mode="function"``), or channels-last ``DCDPointwise`` nodes with their residual
   and activation (``mode="fused"``, :mod:`._fused`).

No per-sample weight reaches a Conv and the batch axis stays symbolic (unless fixed):
every Reshape our emission writes copies the batch (``0``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
import torch
from onnx import helper
from torch import nn

from .._atomic import atomic_output, check_output_path
from .._forward import positional_names
from .._input_tree import TREE_KEY, example_tree, read_tree, tree_of_view
from .._modes import onnx_exporting
from .._outputs import dataclass_fields, leaf_name, output_leaves
from .._version import __version__
from ..errors import ExportError, ParityError
from ..state_dict import require_deployable, unwrap
from ._builder import DOMAIN
from ._deploy_dcd import STRATEGIES, DeployDCD
from ._emit import drop_missing, emit_layers
from ._opset import convert_opset
from ._other_size import check_other_size, other_size_example
from ._placeholder import DOMAIN as PLACEHOLDER_DOMAIN
from ._trace import NATIVE_OPSET, trace
from ._trace_worker import TraceWorker, trace_worker
from .lowering import example_tuple, input_hw, to_deploy

DEFAULT_OPSET = NATIVE_OPSET
MIN_OPSET = 11  # onnx's converter writes Unsqueeze/ReduceSum's axes as attributes below 13
MODES = ("standard", "function", "fused")
#: Version of the layout of :meth:`ExportResult.to_dict` (``dcd-export --json``).
EXPORT_SCHEMA = "dcd-export.report/1"  # fields added since: fused, unfused, input/output names, dynamic_size,
# unread_inputs
#: metadata_props key of the layer record (read by :mod:`dcd_deploy.parity`).
LAYERS_KEY = "dcd_deploy.layers"
#: Ops OUR emission of a dynamic layer may write (docs/design.md#emission); the rest of
#: the graph is torch.onnx's, held to the standard domain only.
ALLOWED_OPS = frozenset(
    {
        "Conv",
        "Gemm",
        "MatMul",
        "Mul",
        "Add",
        "Sub",
        "Div",
        "Relu",
        "Clip",
        "HardSigmoid",
        "Sigmoid",
        "Erf",  # only a fused op's body, for the user's GELU folded into it
        "LeakyRelu",  # only a fused op's body, for the user's LeakyReLU folded into it
        "PRelu",  # only a fused op's body, for the user's per-channel PReLU folded into it
        "Softplus",  # only a fused op's body, for the user's Mish folded into it
        "Tanh",  # the same
        "Softmax",
        "AveragePool",
        "GlobalAveragePool",
        "ReduceMean",
        "ReduceSum",
        "MaxPool",
        "Pad",  # only a layer of padding_mode reflect or replicate (circular: Slice, Concat)
        "Reshape",
        "Flatten",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Squeeze",
        "Unsqueeze",
        "Shape",
        "Gather",
        "Expand",
        "Identity",
        "Constant",
    }
)


@dataclass
class ExportResult:
    """What :func:`export_onnx` wrote.

    Truthy when the file was written and parity (if checked) passed.

    Attributes:
        input_size: the traced image input's (H, W) side: an int when square; None
            for a model of no image input (no input of shape (N, C, H, W)).
        fused: DCD layers written as ``DCDPointwise`` nodes (fused mode).
        unfused: DCD layer path -> why it is not fused (fused mode).
        unread_inputs: the key paths of the example dicts' entries that ``forward`` never
            reads, left out of the file (``label`` of a data loader's batch).
    """

    path: Path
    arch: str
    input_size: int | tuple[int, int] | None
    batch: int | None
    opset: int
    mode: str
    num_nodes: int
    op_histogram: dict[str, int]
    size_bytes: int
    seconds: float
    simplified: bool
    strategies: dict[str, str] = field(default_factory=dict)
    fused: list[str] = field(default_factory=list)
    unfused: dict[str, str] = field(default_factory=dict)
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    dynamic_size: bool = False
    unread_inputs: list[str] = field(default_factory=list)
    parity: object | None = None  # ParityReport

    def __bool__(self) -> bool:
        return self.parity is None or bool(self.parity)

    def fused_summary(self) -> str:
        """``N of M DCD layers fused`` (fused mode)."""
        return f"{len(self.fused)} of {len(self.fused) + len(self.unfused)} DCD layers fused"

    def to_dict(self) -> dict:
        """The JSON document of ``dcd-export --json`` (schema :data:`EXPORT_SCHEMA`)."""
        d = {"schema": EXPORT_SCHEMA, "version": __version__}
        d.update((k, v) for k, v in self.__dict__.items() if k != "parity")
        d["path"] = d["onnx_path"] = str(self.path)
        if isinstance(self.input_size, tuple):
            d["input_size"] = list(self.input_size)
        d["parity"] = self.parity.to_dict() if self.parity is not None else None
        return d


def export_onnx(
    model: nn.Module,
    path,
    *,
    input_size: int | tuple[int, int] | None = None,
    example_inputs=None,
    input_names=None,
    output_names=None,
    dynamic_size: bool = False,
    batch: int | None = None,
    opset: int | None = None,
    simplify: bool = True,
    mode: str = "standard",
    check: bool = True,
    strategy: str = "auto",
    parity_batch_sizes=None,
    parity_inputs=None,
    progress: Callable[[str], None] | None = None,
    accept_inconclusive: bool = False,
    parity_preprocess=None,
    parity_inputs_description: str | None = None,
    parallel_check: bool = False,
    trace_worker=None,
) -> ExportResult:
    """Export ``model`` to ONNX in deploy form; the file appears only if all succeeded.

    Args:
        model: any module with this package's dynamic layers (not modified), traceable by
            ``torch.export``.
        path: output ``.onnx`` path; its directory must exist.
        input_size: side or ``(H, W)`` of the default example image (None: 224, or
            the size of ``parity_inputs``' images).
        example_inputs: a tensor or tuple of tensors passed positionally to ``forward``
            (default: the first sample of each of ``parity_inputs`` when ``input_size`` is
            left out, so the file takes what it is checked on; else one zero (1, 3, H, W)
            image); axis 0 of each is the batch. An
            argument may be a dict, list or tuple of tensors (nested): the file takes
            its tensors, named by key path (the keys alone for a single dict argument,
            else ``argname.key``), and records the structure (:data:`TREE_KEY`).
        input_names: ONNX input names (default ``input`` for one input, else the
            ``forward`` argument names, or the key paths of dict arguments).
        output_names: ONNX output names (default ``logits`` for a tensor, ``output_0``..
            for a tuple or list, the keys of a dict).
        dynamic_size: make height and width symbolic too (4-D inputs); an
            :class:`ExportError` names the layer that needs fixed sizes.
        batch: fixed batch size, or None for a dynamic batch axis.
        opset: default-domain opset, 11 up to the installed onnx's newest (default 18,
            what torch.onnx writes); an op that cannot be written at it is an
            :class:`ExportError` naming it (docs/design.md, "Other opsets").
        simplify: run onnxsim on the graph (standard mode; onnxsim would inline the
            functions of the other modes) and keep its result if it passes the parity
            check (else the unsimplified graph is checked and kept), or with ``check``
            off, if onnxsim's own numeric check passes.
        mode: ``standard``, ``function`` (one ``dcd_deploy`` node per DCD layer) or
            ``fused`` (channels-last ``DCDPointwise`` nodes for a fused kernel, e.g.
            :func:`dcd_deploy.openvino_extension`; not simplified either).
        check: compare against PyTorch with :func:`~dcd_deploy.check_parity`; a failure
            raises :class:`ParityError` and writes nothing. A ``fused`` file is checked in
            ONNX Runtime (its function bodies) and, when openvino is installed, in OpenVINO
            with the fused kernels.
        strategy: DCD layer form, ``latent``, ``weight`` or ``auto``.
        parity_batch_sizes: batch sizes the parity check runs (a fixed ``batch`` overrides);
            None: :func:`~dcd_deploy.parity.default_batch_sizes` of ``parity_inputs``.
        parity_inputs: the check's inputs instead of synthetic ones (a tensor, or a tuple
            in input order, or the arguments as ``forward`` takes them; see
            :func:`~dcd_deploy.check_parity`).
        progress: called with one line per finished stage (``[lower] 0.4 s``, ``[emit]`` (the
            trace included), ``[simplify]``, ``[write]``, ``[check]``).
        accept_inconclusive: let the check pass when its end-to-end comparison is
            inconclusive and no dynamic layer decided it (see :class:`~dcd_deploy.parity.ParityReport`).
        parity_preprocess: the model's preprocessing for the check's built-in images
            (:class:`~dcd_deploy.preprocess.Preprocess` or a preset name); ``"uint8"``,
            a model that takes uint8 pixels, is traced with a uint8 image when
            ``example_inputs`` is None, so the file's input is uint8.
        parity_inputs_description: what ``parity_inputs`` are, for the file's metadata.
        parallel_check: compute the check's PyTorch side (float64 reference, fp32
            outputs) in a forked process while the model is traced
            (:func:`~dcd_deploy.parity.prefetch`; Linux, two cores or more); the
            verdict is the same. ``dcd-export`` turns it on.
        trace_worker: a :class:`~dcd_deploy.exporters._trace_worker.TraceWorker` started
            before the model was loaded, which has imported the exporter meanwhile: the
            trace runs there (this process traces if it cannot, e.g. a module that does
            not pickle); the same graph either way. ``dcd-export`` starts one.

    Raises:
        ExportError: bad arguments, an unwritable path, a model torch.export cannot trace
            (one line naming the construct), or a layer that cannot be lowered.
        ParityError: ONNX Runtime disagrees with PyTorch beyond tolerance, or
            (:class:`~dcd_deploy.errors.NonFiniteOutputError`) the model itself outputs
            NaN or Inf on finite inputs.
    """
    start, model = time.perf_counter(), unwrap(model)  # a torch.compile'd or DataParallel model: what it runs
    require_deployable(model, ExportError)
    model, example_inputs, parity_inputs = _flat_inputs(model, example_inputs, parity_inputs)
    opset = _checked_arguments(opset=opset, mode=mode, strategy=strategy, batch=batch)
    example_inputs, hw = _traced_with(example_inputs, parity_inputs, input_size, parity_preprocess, dynamic_size)
    example = example_tuple(example_inputs, hw)
    hw = (image_hw := _image_hw(example)) or hw
    check_output_path(path := Path(path), error=ExportError)
    stage = _Stages(progress)
    sizes = _parity_sizes(batch, parity_batch_sizes, parity_inputs)
    checked_with = {
        "sizes": sizes,
        "inputs": parity_inputs,
        "example_inputs": example if example_inputs is not None or dynamic_size else None,  # symbolic sides
        "preprocess": parity_preprocess,
        "dynamic_size": dynamic_size,
    }
    ahead = _prefetch(model, example, batch=batch, **checked_with) if check and parallel_check else None
    with contextlib.closing(ahead) if ahead is not None else contextlib.nullcontext(), onnx_exporting():
        deploy, proto, fused = _lowered_and_built(
            model,
            example,
            strategy=strategy,
            hw=hw,
            names=(input_names, output_names),
            dynamic_size=dynamic_size,
            batch=batch,
            opset=opset,
            mode=mode,
            stage=stage,
            worker=trace_worker,
            meanwhile=functools.partial(_while_tracing, model, simplify=simplify and mode, check=check, ahead=ahead),
        )
        candidates = _candidates(proto, mode=mode, simplify=simplify, check=check, stage=stage)
        checker = None
        if check:
            for c in candidates:
                _record_parity_inputs(c, parity_inputs, parity_inputs_description, parity_preprocess)
            checker = functools.partial(
                _check, model, mode=mode, accept_inconclusive=accept_inconclusive, prefetched=ahead, **checked_with
            )
        written, report = _write_checked(path, candidates, checker, stage)
    return ExportResult(
        path=path,
        arch=getattr(model, "arch", type(model).__name__),
        input_size=_size_value(image_hw),
        batch=batch,
        opset=opset,
        mode=mode,
        seconds=time.perf_counter() - start,
        simplified=len(candidates) > 1 and written is candidates[0],
        strategies=dict(getattr(deploy, "strategies", {})),
        fused=fused.fused,
        unfused=fused.unfused,
        dynamic_size=dynamic_size,
        parity=report,
        **_file_facts(path, written),
    )


def _parity_sizes(batch: int | None, asked, inputs) -> tuple[int, ...]:
    """The check's batch sizes: a fixed ``batch``; else those ``asked``; else the
    defaults that ``inputs`` fill (:func:`~dcd_deploy.parity.default_batch_sizes`)."""
    from ..parity import default_batch_sizes

    return (batch,) if batch is not None else tuple(asked or default_batch_sizes(inputs))


def _flat_inputs(model: nn.Module, example_inputs, parity_inputs):
    """(model, example_inputs, parity_inputs) with flat tensors: a model of dict (list,
    tuple) arguments becomes its flat view (:mod:`dcd_deploy._input_tree`), the
    examples and the check's inputs their leaves; any other model is returned as it is."""
    if isinstance(example_inputs, dict):  # a single dict argument, not wrapped in a tuple
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not example_inputs:
        return model, example_inputs, parity_inputs
    tree = example_tree(model, tuple(example_inputs))
    if tree is None:
        return model, example_inputs, parity_inputs
    return tree.applied(model, tuple(example_inputs), parity_inputs)


def _prefetch(model, example, *, batch, dynamic_size, sizes, inputs, example_inputs, preprocess):
    """The check's PyTorch side started in a second process (:func:`~dcd_deploy.parity.prefetch`)."""
    from ..parity import prefetch

    return prefetch(
        model,
        example,
        batch=batch,
        dynamic_size=dynamic_size,
        batch_sizes=sizes,
        inputs=inputs,
        example_inputs=example_inputs,
        preprocess=preprocess,
    )


def _lowered_and_built(
    model, example, *, strategy, hw, names, dynamic_size, batch, opset, mode, stage, worker, meanwhile
):
    """(deploy form, ONNX proto, emission record): lower, then trace and emit."""
    input_names, output_names = names
    deploy = to_deploy(model, strategy=strategy, input_size=hw, example_inputs=example)
    out_names, out_types = _output_names(deploy, example, output_names)
    if dynamic_size:
        _check_dynamic_size(deploy)
    stage("lower")
    proto, fused = _build(
        deploy,
        example_inputs=example,
        batch=batch,
        opset=opset,
        mode=mode,
        arch=getattr(model, "arch", type(model).__name__),
        input_size=hw,
        dynamic_size=dynamic_size,
        input_names=_input_names(model, example, input_names),
        output_names=out_names,
        output_types=out_types,
        progress=stage,
        worker=worker,
        meanwhile=meanwhile,
    )
    return deploy, proto, fused


def _while_tracing(model: nn.Module, *, simplify: str | bool, check: bool, ahead) -> None:
    """What the stages after the trace import and build, done while a trace worker traces
    (this process would wait): onnxsim (with sympy: 0.6-1 s of CPU where torch.export is
    not imported), ONNX Runtime, the float64 copy of the model the layer-wise check reads."""
    if simplify == "standard":  # the mode: only a standard-op graph is simplified
        import onnxsim  # noqa: F401
    if check:
        import onnxruntime  # noqa: F401

        if ahead is not None:
            ahead.prepare_reference_model(model)


def _candidates(proto: onnx.ModelProto, *, mode: str, simplify: bool, check: bool, stage) -> list[onnx.ModelProto]:
    """The graphs to write, in order of preference: onnxsim's (standard mode) before the
    unsimplified one. With a parity check to follow, onnxsim's own check (random inputs,
    ONNX Runtime against itself) is the weaker of the two: the parity check decides, and
    the unsimplified graph is kept if the simplified one fails it."""
    candidates = [proto]
    if simplify and mode == "standard":
        simpler, simplified = _simplify_keeping_layers(proto, own_check=not check)
        if simplified:
            candidates.insert(0, simpler)
        stage("simplify")
    for c in candidates:
        _check_ops(c, mode)
    return candidates


def _file_facts(path: Path, proto: onnx.ModelProto) -> dict:
    """What :class:`ExportResult` says of the written graph and file."""
    hist = Counter(_op_name(n) for n in proto.graph.node)
    return {
        "num_nodes": len(proto.graph.node),
        "op_histogram": dict(hist.most_common()),
        "size_bytes": path.stat().st_size,
        "input_names": [i.name for i in proto.graph.input],
        "output_names": [o.name for o in proto.graph.output],
        "unread_inputs": list(getattr(read_tree(proto), "unread", ())),
    }


def _checked_arguments(*, opset, mode, strategy, batch) -> int:
    """The opset to write; an :class:`ExportError` for an argument out of its range."""
    opset = DEFAULT_OPSET if opset is None else opset
    if (
        isinstance(opset, bool)
        or not isinstance(opset, int)
        or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version()
    ):
        raise ExportError(f"opset {opset} is not supported; use {MIN_OPSET}-{onnx.defs.onnx_opset_version()}")
    if mode not in MODES:
        raise ExportError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if strategy not in STRATEGIES:
        raise ExportError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ExportError(f"batch must be a positive integer or None (dynamic), not {batch!r}")
    return opset


def _check(
    model, path, *, sizes, inputs, example_inputs, mode, accept_inconclusive, preprocess, dynamic_size, prefetched=None
):
    """The parity check; a ``dynamic_size`` file that passes it is checked once more at a
    second size (:mod:`._other_size`)."""
    from ..parity import check_parity

    report = check_parity(
        model,
        path,
        batch_sizes=sizes,
        inputs=inputs,
        example_inputs=example_inputs,
        backends=_parity_backends(mode),
        accept_inconclusive=accept_inconclusive,
        preprocess=preprocess,
        prefetched=prefetched,
    )
    traced_hw = _image_hw(example_inputs) if dynamic_size else None
    other = other_size_example(model, example_inputs) if report and traced_hw else None
    if other is not None:
        check_other_size(model, path, other, traced=example_inputs, preprocess=preprocess)
    return report


def _write_checked(path: Path, candidates: list[onnx.ModelProto], check, stage):
    """Write the first candidate that passes ``check`` (None: the first) to ``path``; a
    failure of the last raises :class:`ParityError` and leaves nothing at ``path``.

    Returns:
        (the proto written, its parity report or None).
    """
    with atomic_output(path, error=ExportError) as tmp:
        for i, proto in enumerate(candidates):
            onnx.save(proto, tmp)
            # The checker reads the written file: what the user gets, and about 3x faster on
            # big models than checking the in-memory proto (which serializes it a second time).
            onnx.checker.check_model(str(tmp), full_check=True)
            stage("write")
            if check is None:
                return proto, None
            report = check(tmp)
            report.onnx_path = str(path)  # the file the user gets, not its temporary name
            stage("check")
            if report:
                return proto, report
            if report.verdict == "FAIL" and i + 1 < len(candidates):
                continue  # onnxsim's graph failed: the check decides on the unsimplified one
            raise ParityError(
                f"parity check {'inconclusive' if report.verdict == 'INCONCLUSIVE' else 'failed'}: {report.summary()}",
                report,
            )
    raise AssertionError("no candidate graph")


def build_onnx(
    deploy: nn.Module,
    *,
    example_inputs=None,
    input_size=224,
    batch: int | None = None,
    opset: int = DEFAULT_OPSET,
    mode: str = "standard",
    arch: str = "model",
    dynamic_size: bool = False,
    input_names=None,
    output_names=None,
) -> onnx.ModelProto:
    """Export a deploy form (:func:`to_deploy`'s result, or any module whose dynamic
    layers have an ``emit`` method) as an ONNX model (no simplification, no checks)."""
    return _build(
        deploy,
        example_inputs=example_inputs,
        input_size=input_size,
        batch=batch,
        opset=opset,
        mode=mode,
        arch=arch,
        dynamic_size=dynamic_size,
        input_names=input_names,
        output_names=output_names,
    )[0]


def _build(
    deploy: nn.Module,
    *,
    example_inputs,
    input_size,
    batch,
    opset,
    mode,
    arch,
    dynamic_size,
    input_names,
    output_names,
    output_types=None,
    progress=None,
    worker=None,
    meanwhile=None,
):
    """:func:`build_onnx`, also returning the :class:`~._emit.Emitted` record.

    ``output_types``: the dataclass types among the model's outputs (:mod:`dcd_deploy._outputs`).
    """
    hw = input_hw(input_size)
    example = example_tuple(example_inputs, hw)
    if input_names is None:
        input_names = _input_names(deploy, example, None)
    if output_names is None or output_types is None:
        output_names, output_types = _output_names(deploy, example, output_names)
    traced = trace(
        deploy,
        example,
        batch=batch,
        dynamic_size=dynamic_size,
        input_names=input_names,
        output_names=output_names,
        output_types=output_types,
        worker=worker,
        meanwhile=meanwhile,
    )
    proto = traced.proto
    modules = dict(deploy.named_modules())
    emitted = emit_layers(
        proto,
        emitters=traced.emitters,
        mode=mode,
        opset=NATIVE_OPSET,
        modules=modules,
        folded_bn=getattr(deploy, "folded_bn", {}),
    )
    if opset != NATIVE_OPSET:
        proto = convert_opset(proto, opset)
    proto.ir_version = min(proto.ir_version, 10)  # readable by ONNX Runtime releases of the last years
    proto.producer_name, proto.producer_version = "dcd-deploy", __version__
    image_hw = _image_hw(example)
    # a model of no image input records no input_size (the side of an image it never takes)
    size = {} if image_hw is None else {"input_size": _size_text(image_hw)}
    tree = tree_of_view(deploy)  # a model of dict arguments: how its check rebuilds them
    recorded_tree = {} if tree is None else {TREE_KEY: replace(tree, names=tuple(input_names)).to_json()}
    helper.set_model_props(
        proto,
        {
            "arch": arch,
            **size,
            "batch": str(batch or "dynamic"),
            "dynamic_size": "true" if dynamic_size else "false",
            "dcd_deploy_version": __version__,
            "mode": mode,
            "strategies": ",".join(f"{k}={v}" for k, v in getattr(deploy, "strategies", {}).items()),
            LAYERS_KEY: json.dumps(emitted.layers),
            **recorded_tree,
        },
    )
    if progress is not None:
        progress("emit")
    return proto, emitted


def _traced_with(example_inputs, parity_inputs, input_size, preprocess, dynamic_size: bool):
    """``(example_inputs, (H, W))`` the export traces with. Without ``example_inputs``: uint8
    zeros for a file of pixels; the first sample of each of ``parity_inputs`` (tensors or
    NumPy arrays) when ``input_size`` is left out; else the default image of ``input_size``.

    Raises:
        ExportError: ``input_size`` and fixed-size image ``parity_inputs`` disagree (the
            check would fail in ONNX Runtime on a file of the other size).
    """
    from ..parity import as_tensor

    hw = input_hw(224 if input_size is None else input_size)
    if example_inputs is not None:
        return example_inputs, hw
    given = parity_inputs if isinstance(parity_inputs, (tuple, list)) else (parity_inputs,)
    given = [as_tensor(t) for t in given]
    if given and all(isinstance(t, torch.Tensor) and t.dim() >= 1 and len(t) for t in given):
        if input_size is None:  # copies: a model that writes into its input must not change the caller's
            first = tuple(t[:1].clone() for t in given)
            return (first[0] if len(first) == 1 else first), _image_hw(first) or hw
        got = _image_hw(given)
        if len(given) == 1 and got not in (None, hw) and not dynamic_size:
            raise ExportError(
                f"parity_inputs are {got[0]}x{got[1]} images, but input_size makes a {hw[0]}x{hw[1]} file: leave "
                "input_size out (the file then takes the inputs' size), or give inputs of its size, or dynamic_size=True"
            )
    if _takes_pixels(preprocess):  # its file takes uint8 pixels
        return torch.zeros(1, 3, *hw, dtype=torch.uint8), hw
    return None, hw


def _takes_pixels(preprocess) -> bool:
    """A preprocessing of uint8 pixels as they are (``"uint8"``): the model is traced with them."""
    from ..preprocess import make_preprocess

    return preprocess is not None and make_preprocess(preprocess).dtype == "uint8"


def _image_hw(example) -> tuple[int, int] | None:
    """``(H, W)`` of the first (N, C, H, W) input; None when no input is an image."""
    return next(((int(t.shape[2]), int(t.shape[3])) for t in example if t.dim() == 4), None)


def _size_text(hw: tuple[int, int]) -> str:
    """The metadata's ``input_size``: ``224`` when square, else ``256x320``."""
    return str(hw[0]) if hw[0] == hw[1] else f"{hw[0]}x{hw[1]}"


def _size_value(hw: tuple[int, int] | None) -> int | tuple[int, int] | None:
    return None if hw is None else hw[0] if hw[0] == hw[1] else hw


def _input_names(model: nn.Module, example, given) -> list[str]:
    if given is not None:
        names = [given] if isinstance(given, str) else list(given)
        if len(names) != len(example) or len(set(names)) != len(names):
            raise ExportError(f"input_names needs {len(example)} distinct names, got {names}")
        return names
    tree = tree_of_view(model)
    if tree is not None:
        return list(tree.names)
    if len(example) == 1:
        return ["input"]
    params = positional_names(model)
    return params[: len(example)] if len(params) >= len(example) else [f"input_{i}" for i in range(len(example))]


def _output_names(deploy: nn.Module, example, given) -> tuple[list[str], tuple[type, ...]]:
    """The ONNX output names, and the dataclass types among the outputs (traced as nodes)."""
    with torch.no_grad(), onnx_exporting():  # the outputs of the path traced (build_onnx too)
        out = deploy(*[t.clone() for t in example])  # a forward may change its inputs in place
    leaves, types = output_leaves(out)
    if not leaves or not all(isinstance(t, torch.Tensor) for _, t in leaves):
        raise ExportError("the model's outputs must be tensors (a tensor, or a tuple, list, dict or dataclass of them)")
    if given is not None:
        names = [given] if isinstance(given, str) else list(given)
        if len(names) != len(leaves) or len(set(names)) != len(names):
            raise ExportError(f"output_names needs {len(leaves)} distinct names, got {names}")
        return names, types
    if isinstance(out, torch.Tensor):
        return ["logits"], types
    keyed = isinstance(out, dict) or dataclass_fields(out) is not None  # named by key or field alone
    names = [leaf_name(path, keyed=keyed) for path, _ in leaves]
    if len(set(names)) != len(names):
        names = [f"output_{i}" for i in range(len(leaves))]
    return names, types


def _check_dynamic_size(deploy: nn.Module) -> None:
    """Refuse ``dynamic_size`` when one of our layers needs fixed spatial sizes."""
    for path, m in deploy.named_modules():
        if isinstance(m, DeployDCD) and m.pool_size > 1:  # 0: a linear layer, no pool
            raise ExportError(
                f"{path}: a DCD layer with a {m.pool_size}x{m.pool_size} adaptive pool needs fixed "
                "input sizes (its pooling windows depend on them): export without dynamic_size"
            )


def _check_ops(proto: onnx.ModelProto, mode: str) -> None:
    """Our emission only allowed ops; the rest standard-domain (plus ``dcd_deploy`` calls)."""
    for node in proto.graph.node:
        if node.domain == PLACEHOLDER_DOMAIN:
            raise AssertionError(f"placeholder left in the graph: {node.name}")
        if node.domain not in ("", "ai.onnx") and not (mode != "standard" and node.domain == DOMAIN):
            raise ExportError(
                f"the exported graph has a {node.domain}.{node.op_type} node ({node.name}): "
                "only standard ONNX ops can be written"
            )
    for fn in proto.functions:
        bad = sorted({n.op_type for n in fn.node if n.domain in ("", "ai.onnx")} - ALLOWED_OPS)
        if bad:
            raise AssertionError(f"function {fn.name} contains disallowed ops: {bad}")
    emitted_prefixes = tuple(
        e["path"] + "/"
        for e in json.loads(next((p.value for p in proto.metadata_props if p.key == LAYERS_KEY), "[]"))
        if e["kind"] not in ("Conv", "Linear")
    )
    if emitted_prefixes:
        bad = sorted(
            {
                n.op_type
                for n in proto.graph.node
                if n.domain in ("", "ai.onnx") and n.name.startswith(emitted_prefixes) and n.op_type not in ALLOWED_OPS
            }
        )
        if bad:  # a lowering bug, not a user error
            raise AssertionError(f"our emission wrote disallowed ops: {bad}")


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


def _simplify(proto: onnx.ModelProto, own_check: bool = True) -> tuple[onnx.ModelProto, bool]:
    """onnxsim, kept only if its own numeric check passes (``own_check``; else the caller
    checks the result)."""
    import contextlib
    import io

    import onnxsim

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            simplified, ok = onnxsim.simplify(proto, check_n=1 if own_check else 0)
    except Exception:  # onnxsim failing is not the user's problem: keep the unsimplified graph
        return proto, False
    return (simplified, True) if ok else (proto, False)


def _simplify_relinked(proto: onnx.ModelProto, own_check: bool) -> tuple[onnx.ModelProto, bool]:
    after, simplified = _simplify(proto, own_check)
    if simplified:
        _relink_layers(proto, after)
    return after, simplified


def _relink_layers(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    """Point the layer records at the tensors onnxsim kept: it folds an Identity, so the
    tensor feeding a graph output takes the output's name; drop a record whose tensor is gone."""
    props = {p.key: p for p in after.metadata_props}
    if LAYERS_KEY not in props:
        return
    identity = {n.input[0]: n.output[0] for n in before.graph.node if n.op_type == "Identity"}
    names = {o for n in after.graph.node for o in n.output} | {i.name for i in after.graph.input}
    layers = json.loads(props[LAYERS_KEY].value)
    for layer in layers:
        for key in ("input", "output", "residual"):
            name = layer[key]
            while name and name not in names and name in identity:
                name = identity[name]
            layer[key] = name
    props[LAYERS_KEY].value = json.dumps(drop_missing(layers, after))


def _record_parity_inputs(proto, inputs, description, preprocess) -> None:
    """Metadata ``dcd_deploy.parity_inputs``: what the export's parity check ran on."""
    from ..preprocess import make_preprocess

    if inputs is None:
        text = f"built-in natural images, preprocessed: {make_preprocess(preprocess).describe()}"
    else:
        text = description or f"caller's inputs, {_shapes_text(inputs)}, taken as preprocessed"
    entry = proto.metadata_props.add()
    entry.key, entry.value = "dcd_deploy.parity_inputs", text


def _shapes_text(inputs) -> str:
    """``4 x 3 x 96 x 96`` for a tensor; its parts joined for a tuple/list (by name for a dict)."""

    def shape(x) -> str:
        dims = getattr(x, "shape", None)
        return " x ".join(map(str, dims)) if dims is not None else type(x).__name__

    if isinstance(inputs, dict):
        return ", ".join(f"{name}: {shape(x)}" for name, x in inputs.items())
    if isinstance(inputs, (tuple, list)):
        return " and ".join(shape(x) for x in inputs)
    return shape(inputs)


def _simplify_keeping_layers(proto: onnx.ModelProto, *, own_check: bool = True) -> tuple[onnx.ModelProto, bool]:
    """onnxsim, keeping every tensor the layer record names: they are graph outputs while
    it runs (else it may fold a layer's Reshape/Unsqueeze boundary away), removed after.
    A tensor that only feeds the final Identity takes the graph output's name instead
    (onnxsim folds that Identity)."""
    props = {p.key: p for p in proto.metadata_props}
    if LAYERS_KEY not in props:
        return _simplify(proto, own_check)
    layers = json.loads(props[LAYERS_KEY].value)
    outputs = {o.name for o in proto.graph.output}
    graph_inputs = {i.name for i in proto.graph.input}
    identity = {n.input[0]: n.output[0] for n in proto.graph.node if n.op_type == "Identity"}
    keep = [
        t
        for t in dict.fromkeys(layer[k] for layer in layers for k in ("input", "output", "residual"))
        if t and t not in outputs and identity.get(t) not in outputs and t not in graph_inputs
    ]
    n = len(proto.graph.output)
    try:  # onnxsim needs each output's shape
        known = {v.name: v for v in onnx.shape_inference.infer_shapes(proto).graph.value_info}
    except Exception:  # onnx's inference failing is no reason to skip simplification
        known = {}
    if not all(t in known for t in keep):
        return _simplify_relinked(proto, own_check)  # not all layer tensors keepable: records of lost ones are dropped
    work = onnx.ModelProto()
    work.CopyFrom(proto)
    work.graph.output.extend(known[t] for t in keep)
    after, simplified = _simplify(work, own_check)
    if not simplified:
        return proto, False
    del after.graph.output[n:]
    for layer in layers:
        for key in ("input", "output", "residual"):
            if identity.get(layer[key]) in outputs:
                layer[key] = identity[layer[key]]
    next(p for p in after.metadata_props if p.key == LAYERS_KEY).value = json.dumps(drop_missing(layers, after))
    return after, True


__all__ = [
    "ALLOWED_OPS",
    "ExportResult",
    "TraceWorker",
    "build_onnx",
    "export_onnx",
    "LAYERS_KEY",
    "TREE_KEY",
    "trace_worker",
]
