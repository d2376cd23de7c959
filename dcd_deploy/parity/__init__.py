"""Parity: does the ONNX file compute what the PyTorch model computes?

The reference is the original model (training form, eval mode), never the deploy form,
so the check covers lowering, folding and emission together. ONNX Runtime runs the
file twice, with graph optimisations disabled and fully enabled (its rewrites and
layout changes are part of what ships). With ``backends=("openvino",)`` (or both),
OpenVINO's CPU plugin runs it once more, with this toolkit's fused kernels loaded when
the file has ``dcd_deploy`` nodes (:mod:`dcd_deploy.openvino`); the verdict rules are
the same for every runtime.

The verdict is conditioning-aware. fp32 arithmetic is only as good as the model and its
inputs let it be: a network fed far outside its working range amplifies rounding until
PyTorch's own fp32 result is percent away from the exact one, and then fp32 against fp32
says nothing about the export. So the original model is also evaluated in float64 (a
copy; the user's model is not touched), and both fp32 computations are measured
against that reference:

* ``err_torch = max |torch_fp32 - ref64|``: how well fp32 can do here at all;
* ``err_onnx = max |onnx - ref64|``: how well the export does;
* a comparison passes when ``err_onnx <= max(atol + rtol * scale, k * err_torch)`` with
  ``scale = max |ref64|`` over the batch and ``k =`` :data:`DEFAULT_K`.

The first bound is the classic one: folding BNs and reassociating sums across ~50 layers
moves a well-conditioned fp32 result by 1e-6..1e-4 of the output scale, ``rtol = 1e-3``
leaves a 10x margin, and a lowering mistake shows at 1e-2 or more. The second lets the
export be as good as PyTorch itself where fp32 is ill-conditioned: two fp32 evaluations
of the same function in different orders land at comparable distances from the exact
result. Measured over the zoo's DCD, DY-Conv and CondConv models on natural, noise and
5x-scaled inputs, ``err_onnx / err_torch`` stayed within 0.6-2.5 for DCD exports and
reached 8 for DY-Conv, whose deploy form sums K separately convolved kernels (larger
intermediate terms than mixing the kernels first); so ``k = 10``. It only matters where
``err_torch`` exceeds a tenth of the classic bound; a wrong weight, which moves the
function itself, lands orders of magnitude further out on inputs where fp32 is
well-conditioned. When ``err_torch`` alone exceeds the classic bound the report says so:
fp32 itself is ill-conditioned on those inputs, and a verdict on inputs from the model's
working range (``inputs=``, ``--inputs FILE``) is the one to trust.

Every output of the file is compared on its own (a classifier's logits, a feature map,
each tensor of a tuple or dict output; :mod:`._signature` says how inputs and outputs
are matched), and the summary names the worst one. Top-1 disagreements with the
reference count only for (N, classes) outputs, and only where its top-2 margin exceeds
the tolerance. A bool or integer output (a mask's ``p > 0.5``, an ``argmax``) is compared
by the share of its elements that differ, at most :data:`DISCRETE_FRACTION` (or ``k``
times PyTorch fp32's own share): a decision on a value within rounding of its threshold
flips under any other summation order. Non-finite outputs for non-finite inputs pass
when ONNX Runtime has them in the same places as PyTorch; a non-finite output for a
finite input means the model itself is broken (:class:`NonFiniteOutputError`), whatever the export does.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .._hooks import copy_model
from .._input_tree import read_tree, tree_of_view
from .._modes import evaluating, onnx_exporting
from ..errors import DCDDeployError, UnsupportedInputError, first_line
from ..preprocess import PRESETS, Preprocess, make_preprocess
from ..state_dict import require_deployable, unwrap
from ._compare import compare as _compare
from ._compare import refuse_nonfinite as _refuse_nonfinite
from ._layerwise import LAYER_RTOL, LAYER_SAMPLES, LayerRecord, LayerRow, compare_layers, read_layers
from ._layerwise import tensors as layer_tensors
from ._prefetch import Prefetch
from ._report import DEFAULT_ATOL, DEFAULT_K, DEFAULT_RTOL, DISCRETE_FRACTION, SCHEMA, ParityReport, ParityRow
from ._runtimes import BACKENDS, LEVELS
from ._runtimes import runners as _runners
from ._signature import (
    TensorSpec,
    as_list,
    as_tensor,
    batch_axes,
    flatten_outputs,
    match_outputs,
    read_signature,
    synthetic_inputs,
)
from ._signature import load as load_onnx

#: Inputs per float64 reference batch (bounds the copy's activation memory).
REFERENCE_CHUNK = 8
#: The batch sizes a check runs when none are given: one sample, and two (a batch axis
#: that is dynamic in the file); of these, those the caller's inputs fill.
DEFAULT_BATCH_SIZES = (1, 2)


def default_batch_sizes(inputs=None) -> tuple[int, ...]:
    """:data:`DEFAULT_BATCH_SIZES`, those that ``inputs`` (the caller's, in any form the
    check takes; None: synthetic ones, as many as needed) fill, batch 1 at least: one
    image of the user's is checked at batch 1 rather than refused."""
    n = _samples(inputs)
    return DEFAULT_BATCH_SIZES if n is None else tuple(b for b in DEFAULT_BATCH_SIZES if b <= n) or (1,)


def _samples(inputs) -> int | None:
    """The batch (axis 0) of the first array in ``inputs`` (a tensor, array, tuple, list
    or dict, nested), None without one."""
    if isinstance(inputs, (torch.Tensor, np.ndarray)):
        return int(inputs.shape[0]) if inputs.ndim else None
    values = inputs.values() if isinstance(inputs, dict) else inputs if isinstance(inputs, (list, tuple)) else ()
    return next((n for n in map(_samples, values) if n is not None), None)


def check_parity(
    model: nn.Module,
    onnx_path,
    *,
    batch_sizes=None,
    n_inputs: int = 8,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    k: float | None = None,
    inputs=None,
    example_inputs=None,
    backends=("onnxruntime",),
    layers: bool = True,
    accept_inconclusive: bool = False,
    preprocess: Preprocess | str | None = None,
    prefetched: Prefetch | None = None,
    onnx_proto=None,
) -> ParityReport:
    """Compare ``model`` (PyTorch, eval mode) with ``onnx_path`` run by ONNX Runtime (or OpenVINO).

    Args:
        model: the original model (not modified; a float64 copy serves as reference).
        onnx_path: an ONNX file exported from it.
        batch_sizes: batch sizes to run (each must fit the file's batch axis); None: a
            fixed batch file's batch, else :func:`default_batch_sizes` of ``inputs``.
        n_inputs: synthetic inputs per batch size (rounded up to whole batches).
        seed: seed of the synthetic inputs.
        atol: absolute tolerance (default :data:`DEFAULT_ATOL`).
        rtol: tolerance relative to the output scale (default :data:`DEFAULT_RTOL`).
        k: how many times PyTorch's own fp32 error the export may reach (default
            :data:`DEFAULT_K`).
        inputs: explicit inputs instead of synthetic ones, all used in whole batches of
            each size: a tensor for a one-input file (e.g. (N, 3, H, W) images), else a
            tuple in the file's input order or a dict by ONNX input name; axis 0 is the
            batch of every tensor. For a model of dict arguments (the file records their
            structure) also the arguments as ``forward`` takes them (a tuple of them, or
            the one dict alone); the model is called with that structure rebuilt.
        example_inputs: a tuple of tensors as the export traced with (any batch): the
            shapes and dtypes of synthetic data for inputs that are not images, and the
            image size where the file's is symbolic.
        backends: runtimes to run the file in, of :data:`BACKENDS`: ``onnxruntime``
            (optimisations off and on) and ``openvino`` (CPU plugin, fp32, one thread,
            the fused-kernel extension loaded when the file needs it).
        layers: also check every layer the file records on its own (see
            :mod:`._layerwise`); a file without a record is checked end to end only.
        accept_inconclusive: let an end-to-end comparison without power (PyTorch fp32
            itself far off float64) pass when no dynamic layer was checked on its own;
            the verdict then says it was accepted.
        preprocess: how the model's images are made from pixels (a
            :class:`~dcd_deploy.preprocess.Preprocess` or a preset name of
            :data:`~dcd_deploy.preprocess.PRESETS`; default ``imagenet``): the built-in
            images go through it, so a model trained on [0, 255] or BGR inputs is checked
            on images it knows. ``inputs`` are taken as the model takes them.
        prefetched: the PyTorch side computed ahead in a second process
            (:func:`prefetch`, what ``export_onnx`` does while it traces); used only if
            it was computed on exactly this check's inputs, and ended either way.
        onnx_proto: the file's ``ModelProto`` when the caller has read it already (its
            weights inside; ``dcd-validate`` reads the file once); read here when None.
            The check does not modify it.

    Returns:
        A :class:`ParityReport`; it is falsy when any comparison failed.

    Raises:
        NonFiniteOutputError: the PyTorch model outputs NaN or Inf for a finite input.
        BackendLoadError: ONNX Runtime cannot load the file, or OpenVINO cannot compile it.
        BackendRunError: a runtime fails running the file on the inputs.
        ExtensionError: OpenVINO or its extension is missing.
        DCDDeployError: the inputs do not fit the file (count, rank, batch, spatial size),
            the model does not run on them, or its outputs do not match the file's.
    """
    atol = DEFAULT_ATOL if atol is None else float(atol)
    rtol = DEFAULT_RTOL if rtol is None else float(rtol)
    k = DEFAULT_K if k is None else float(k)
    onnx_path = Path(onnx_path)
    model = unwrap(model)  # a torch.compile'd or DataParallel model: the module it runs
    require_deployable(model, DCDDeployError)
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        raise DCDDeployError(f"unknown parity backend {', '.join(unknown) or '(none)'}; expected {', '.join(BACKENDS)}")
    proto = load_onnx(onnx_path) if onnx_proto is None else onnx_proto
    in_specs, out_specs = read_signature(onnx_path, proto)
    if batch_sizes is None:
        fixed = in_specs[0].static(0) if in_specs else None
        batch_sizes = (fixed,) if fixed is not None else default_batch_sizes(inputs)
    model, inputs, example_inputs = _as_file_takes(model, proto, inputs, example_inputs)
    examples = as_list(example_inputs, in_specs, "example_inputs")
    given = as_list(inputs, in_specs, "inputs")
    records = read_layers(onnx_path, proto) if layers else None
    extra, missing = _layer_tensors(records, proto)
    run, run_layers = _runs(onnx_path, backends, in_specs, out_specs, extra, proto)
    synthetic = given is None
    preprocess = make_preprocess(preprocess)
    given = _inputs(given, in_specs, examples, preprocess, n_inputs=n_inputs, batch_sizes=batch_sizes, seed=seed)
    report = ParityReport(
        onnx_path=str(onnx_path),
        input_size=_image_size(in_specs, given),
        atol=atol,
        rtol=rtol,
        k=k,
        synthetic_inputs=synthetic,
        outputs=[s.name for s in out_specs],
        accept_inconclusive=bool(accept_inconclusive),
        preprocess=preprocess.to_dict() if synthetic else None,
    )
    # the user's model comes back in the modes it had; it runs on its path for export, the file's
    with evaluating(model), onnx_exporting():
        fixed_batch = in_specs[0].static(0)
        plans = {
            b: _used(b, given[0].shape[0], n_inputs if synthetic else None, fixed_batch, onnx_path) for b in batch_sizes
        }
        most = max(plans.values())
        ref_model, ref64, fp32 = _pytorch_side(model, [x[:most] for x in given], plans, prefetched, records, report)
        axes = batch_axes(in_specs, out_specs)
        _end_to_end(report, model, run, plans, given, ref64, out_specs, onnx_path, fp32=fp32, axes=axes)
        if records:
            samples = _layer_samples([x[:most] for x in given], fixed_batch or max(batch_sizes))
            _layer_by_layer(
                report,
                records,
                missing,
                samples,
                run_layers,
                extra,
                len(out_specs),
                ref_model=ref_model,
                model=model,
                first_backend=backends[0],
            )
        return report


def _as_file_takes(model: nn.Module, proto, inputs, example_inputs):
    """(model, inputs, example_inputs) as the file takes them: for a file recording an
    input tree (a model of dict arguments, :mod:`dcd_deploy._input_tree`), the model's flat
    view and the leaves of inputs given as ``forward`` takes them; else as they are."""
    tree = read_tree(proto)
    if tree is None or tree_of_view(model) is not None:
        return model, inputs, example_inputs
    return tree.applied(model, inputs, example_inputs)


def _pytorch_side(model: nn.Module, given: list[torch.Tensor], plans: dict, prefetched, records, report):
    """(reference model, float64 reference outputs, fp32 outputs per batch or None): from
    the prefetch when it computed them, else here (fp32 then by :func:`_end_to_end`)."""
    ahead = prefetched.take(given, plans) if prefetched is not None else None
    if ahead is None:
        ref_model, ref64, report.reference = _reference(model, given)
        return ref_model, ref64, None
    ref64, report.reference = ahead["ref64"], ahead["kind"]
    fp32 = {b: [[(n, torch.from_numpy(a)) for n, a in out] for out in outs] for b, outs in ahead["fp32"].items()}
    ref_model = model if not records else prefetched.reference_model
    if ref_model is None:  # not made while the file was traced
        ref_model = _layer_reference(model)
    return ref_model, ref64, fp32


def _runs(onnx_path: Path, backends, in_specs, out_specs, extra, proto) -> tuple[dict, dict]:
    """(end-to-end runners, layer-wise runners: the file's outputs then ``extra``).

    One session per runtime configuration runs both checks where the layers' extra
    outputs cannot change what is computed (ORT without optimisations); elsewhere the
    end-to-end run keeps the file as it is, since extra outputs stop fusions.
    """
    if not extra:
        return _runners(onnx_path, backends, in_specs, out_specs, proto=proto), {}
    shared = {("onnxruntime", "disabled")} if "onnxruntime" in backends else set()
    # shared: never loaded without extra
    plain = _runners(onnx_path, backends, in_specs, out_specs, proto=proto, skip=shared)
    run_layers = _runners(onnx_path, backends, in_specs, out_specs, extra=extra, proto=proto)
    return {key: run_layers[key] if key in shared else plain[key] for key in run_layers}, run_layers


def _inputs(
    given, in_specs, examples, preprocess: Preprocess, *, n_inputs: int, batch_sizes, seed: int
) -> list[torch.Tensor]:
    """The caller's inputs (float made float32, one batch axis checked), else synthetic
    ones in whole batches of every size (images through ``preprocess``)."""
    if given is None:
        from ..models import natural_pixels

        total = max(-(-n_inputs // b) * b for b in batch_sizes)  # whole batches, rounded up
        return synthetic_inputs(
            in_specs,
            examples,
            total,
            seed=seed,
            images=lambda n, hw, s: preprocess.apply(natural_pixels(n, hw, seed=s)),
        )
    given = [x.float() if x.is_floating_point() else x for x in given]
    if len({x.shape[0] for x in given}) > 1:
        raise DCDDeployError(
            f"inputs: every tensor needs the same batch (axis 0), got {', '.join(str(x.shape[0]) for x in given)}"
        )
    return given


def _end_to_end(
    report: ParityReport,
    model: nn.Module,
    run: dict,
    plans: dict,
    given,
    ref64,
    out_specs,
    onnx_path: Path,
    fp32: dict | None = None,
    axes: list[int] | None = None,
) -> None:
    """One row per batch size, runtime configuration and output: the file's outputs
    against the float64 reference, with PyTorch's own fp32 error beside (``fp32``: the
    model's flattened outputs per batch size, when computed ahead). Each output is
    compared batch-first: its chunks joined along its batch axis (``axes``, per file
    output), then that axis moved to the front."""
    axes = axes or [0] * len(out_specs)
    order = None
    for b, used in plans.items():
        chunks = [[x[i : i + b] for x in given] for i in range(0, used, b)]
        if fp32 is not None:
            flat32 = fp32[b]
        else:
            with torch.no_grad():
                flat32 = [_forward(model, c) for c in chunks]
        if order is None:
            order = match_outputs([n for n, _ in flat32[0]], out_specs, onnx_path)
        ref32 = [
            _batch_first([f[j][1].numpy() for f in flat32], axes[o], spec)
            for o, (j, spec) in enumerate(zip(order, out_specs))
        ]
        ref = [
            _batch_first([p[j] for p in ref64], axes[o], spec)[:used]
            for o, (j, spec) in enumerate(zip(order, out_specs))
        ]
        _same_shapes(ref32, ref, out_specs, b)
        _refuse_nonfinite([x[:used] for x in given], ref32, ref)
        runs = _each_runtime(run, lambda runner, chunks=chunks: [runner([x.numpy() for x in c]) for c in chunks])
        for (backend, name), outs in runs:
            for o, spec in enumerate(out_specs):
                got = _batch_first([out[o] for out in outs], axes[o], spec)
                row = _compare(
                    ref[o],
                    ref32[o],
                    got,
                    name,
                    b,
                    atol=report.atol,
                    rtol=report.rtol,
                    k=report.k,
                    output=spec.name,
                    nan_to_number=backend == "openvino",
                )
                row.backend = backend
                report.rows.append(row)


def _same_shapes(ref32: list[np.ndarray], ref: list[np.ndarray], out_specs, batch: int) -> None:
    """The model's fp32 outputs (batch by batch) and its reference (a few batches at once)
    must join to one shape: they do not where an output's batch is on no axis the check
    can tell (a fixed-batch file's output with its batch inside and another axis of the
    same size)."""
    for r32, r, spec in zip(ref32, ref, out_specs):
        if r32.shape != r.shape and batch == 1 and r32.ndim == r.ndim - 1:
            raise DCDDeployError(
                f"output {spec.name!r}: the model returns {r.shape[1:]} for a batch of 1 but {r.shape} for "
                f"a batch of {r.shape[0]}: it drops the batch axis when it is 1 (as `.squeeze()` with no dim does), "
                "where the file keeps it; squeeze the axes you mean (`.squeeze(-1)`, `.flatten(1)`)"
            )
        if r32.shape != r.shape:
            raise DCDDeployError(
                f"output {spec.name!r}: the model's outputs join to {r32.shape} run {batch} at a time but to "
                f"{r.shape} run all at once, so the check cannot tell which axis holds the batch; return it on "
                "axis 0, or export with a dynamic batch (the file then names the axis)"
            )


def _batch_first(parts: list[np.ndarray], axis: int, spec: TensorSpec) -> np.ndarray:
    """One output's chunks joined along its batch ``axis``, that axis first."""
    if any(p.ndim <= axis for p in parts) or len({p.shape[:axis] + p.shape[axis + 1 :] for p in parts}) > 1:
        shapes = ", ".join(str(p.shape) for p in parts[:3])
        raise DCDDeployError(
            f"output {spec.name!r}: its batches do not join along axis {axis} (shapes {shapes}); "
            "the check needs each output's batch on one axis: axis 0, or the axis a dynamic batch names"
        )
    return np.moveaxis(np.concatenate(parts, axis=axis), axis, 0)


def _layer_by_layer(
    report: ParityReport,
    records,
    missing,
    samples,
    run_layers: dict,
    extra,
    n_outputs: int,
    *,
    ref_model: nn.Module,
    model: nn.Module,
    first_backend: str,
) -> None:
    """Every recorded layer judged on its own input, per runtime configuration (a record
    naming a tensor the file lacks is a failing row of its own)."""
    report.layer_record = True
    report.layers.extend(
        LayerRow.unchecked(r, "the file has no tensor the record names for it", first_backend, "-") for r in missing
    )
    records = [r for r in records if r not in missing]
    if not samples or not records:
        return
    fp32_errors: dict[str, float] = {}

    def layer_values(runner) -> dict[str, list[np.ndarray]]:
        values: dict[str, list[np.ndarray]] = {}
        for chunk in samples:
            got = runner([x.numpy() for x in chunk], with_extra=True)[n_outputs:]
            for tensor, value in zip(extra, got):
                values.setdefault(tensor, []).append(value)
        return values

    for (backend, name), values in _each_runtime(run_layers, layer_values):
        report.layers.extend(
            compare_layers(
                records,
                values,
                ref64=ref_model,
                model=model,
                backend=backend,
                optimization=name,
                k=report.k,
                fp32_errors=fp32_errors,
            )
        )


def _each_runtime(runners: dict, work) -> Iterator[tuple[tuple[str, str], object]]:
    """``(key, work(runner))`` for each runtime configuration, in ``runners``' order, the
    runs of the next configurations going on in threads meanwhile: ONNX Runtime and
    OpenVINO release the GIL while they run, so on a second core they overlap the caller's
    comparisons (the float64 layer evaluations) and each other (dcd-export's check,
    docs/performance.md). Each runner is used by one thread only and runs one thread
    itself; the results, and so the report, are the same as one after the other."""
    keys = list(runners)
    if len(keys) < 2 or (os.cpu_count() or 1) < 2:
        yield from ((key, work(runners[key])) for key in keys)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dcd-parity") as pool:
        futures = [pool.submit(work, runners[key]) for key in keys]
        try:
            for key, future in zip(keys, futures):
                yield key, future.result()
        finally:
            for future in futures:
                future.cancel()


def _layer_tensors(records, proto) -> tuple[tuple[str, ...], list]:
    """(tensors the layer check reads, records naming a tensor the file lacks)."""
    if not records:
        return (), []
    present = {o for n in proto.graph.node for o in n.output} | {i.name for i in proto.graph.input}
    missing = [r for r in records if any(t and t not in present for t in (r.input, r.output, r.residual))]
    return layer_tensors([r for r in records if r not in missing]), missing


def _layer_samples(inputs: list[torch.Tensor], batch: int) -> list[list[torch.Tensor]]:
    """Chunks of ``batch`` samples with finite inputs, at most :data:`LAYER_SAMPLES` samples
    (at least one batch): non-finite values are the end-to-end check's business."""
    finite = torch.ones(inputs[0].shape[0], dtype=torch.bool)
    for x in inputs:
        if x.is_floating_point():
            finite &= torch.isfinite(x).reshape(x.shape[0], -1).all(1)
    index = torch.nonzero(finite).flatten()
    n = min(len(index), max(batch, LAYER_SAMPLES)) // batch * batch
    index = index[:n]
    return [[x[index[i : i + batch]] for x in inputs] for i in range(0, n, batch)]


def _image_size(specs: list[TensorSpec], given: list[torch.Tensor]):
    """The first image input's side (square) or [H, W]; None without an image input."""
    for spec, x in zip(specs, given):
        if spec.is_image:
            h, w = int(x.shape[2]), int(x.shape[3])
            return h if h == w else [h, w]
    return None


def _used(batch: int, available: int, n_inputs: int | None, fixed_batch: int | None, path: Path) -> int:
    """How many inputs a batch size runs: whole batches, up to ``n_inputs`` when given."""
    if fixed_batch is not None and batch != fixed_batch:
        raise DCDDeployError(f"{path} has a fixed batch of {fixed_batch}; cannot check batch {batch}")
    wanted = available if n_inputs is None else min(available, -(-n_inputs // batch) * batch)
    used = wanted // batch * batch
    if not used:
        raise DCDDeployError(
            f"batch size {batch} needs at least {batch} inputs; got {available} (give more, or smaller batch sizes)"
        )
    return used


def _reference_model(model: nn.Module) -> nn.Module:
    """A float64 copy of ``model`` (the user's model is not touched)."""
    return copy_model(model).double().eval()


def prefetch(
    model: nn.Module,
    example: tuple[torch.Tensor, ...],
    *,
    batch: int | None,
    dynamic_size: bool = False,
    batch_sizes=(1, 2),
    n_inputs: int = 8,
    seed: int = 0,
    inputs=None,
    example_inputs=None,
    preprocess: Preprocess | str | None = None,
) -> Prefetch | None:
    """Start computing, in a forked process, what :func:`check_parity` (same arguments)
    will compute of ``model`` for a file exported from ``example`` with ``batch`` and
    ``dynamic_size`` (:mod:`._prefetch`); None where that cannot be started or predicted.

    The file's inputs are predicted from ``example``: its dtypes and shapes, the batch
    axis symbolic unless ``batch``, height and width symbolic with ``dynamic_size``.
    """
    names = [f"input_{i}" for i in range(len(example))]
    specs = [
        TensorSpec(name, _predicted_dims(x, batch, dynamic_size), torch.empty(0, dtype=x.dtype).numpy().dtype)
        for name, x in zip(names, example)
    ]
    try:
        examples = as_list(example_inputs, specs, "example_inputs")
        given = _inputs(
            as_list(inputs, specs, "inputs"),
            specs,
            examples,
            make_preprocess(preprocess),
            n_inputs=n_inputs,
            batch_sizes=batch_sizes,
            seed=seed,
        )
        fixed = specs[0].static(0)
        plans = {
            b: _used(b, given[0].shape[0], n_inputs if inputs is None else None, fixed, Path("-")) for b in batch_sizes
        }
    except (DCDDeployError, TypeError, ValueError):  # the check itself will say what is wrong
        return None
    most = max(plans.values())
    return Prefetch.start(model, [x[:most] for x in given], plans)


def _predicted_dims(x: torch.Tensor, batch: int | None, dynamic_size: bool) -> tuple:
    dims = ["batch" if batch is None else batch, *map(int, x.shape[1:])]
    if dynamic_size and x.dim() == 4:
        dims[2:4] = ["height", "width"]
    return tuple(dims)


def _double(x: torch.Tensor) -> torch.Tensor:
    """A float64 copy of a float tensor, a copy of any other (see :func:`_forward`)."""
    return x.to(torch.float64, copy=True) if x.is_floating_point() else x.clone()


def _forward(model: nn.Module, inputs) -> list[tuple[str, torch.Tensor]]:
    """The model's flattened outputs on copies of ``inputs``: a forward that changes its
    inputs in place (``x.sub_(mean)``, ``F.relu(x, inplace=True)``) must not change the
    inputs the next run and the runtimes see."""
    return flatten_outputs(model(*[x.clone() for x in inputs]))


def _layer_reference(model: nn.Module) -> nn.Module:
    """The model whose layers the layer-wise check evaluates in float64: a float64 copy, or
    the model itself where no copy can be made (its layers then fail as "cannot evaluate")."""
    try:
        return _reference_model(model)
    except (RuntimeError, TypeError, NotImplementedError):
        return model


def _reference(model: nn.Module, inputs: list[torch.Tensor]) -> tuple[nn.Module, list[list[np.ndarray]], str]:
    """(float64 copy for the layer-wise check, reference outputs, their precision): the
    outputs of the float64 copy, or of the model itself in float32 where float64 cannot run
    it end to end (``x.float()`` in ``forward``). Its layers alone still run in float64:
    the layer-wise check keeps its float64 reference then. The outputs come per chunk of
    inputs ([chunk][output]), joined once the file says where each output's batch is."""
    n = inputs[0].shape[0]
    ref = None
    try:
        ref = _reference_model(model)
        with torch.no_grad():
            parts = [
                flatten_outputs(ref(*[_double(x[i : i + REFERENCE_CHUNK]) for x in inputs]))
                for i in range(0, n, REFERENCE_CHUNK)
            ]
        kind = "float64"
    except (RuntimeError, TypeError, NotImplementedError):  # an op or buffer without float64 support
        try:
            with torch.no_grad():
                parts = [_forward(model, inputs)]
        except (RuntimeError, TypeError, ValueError) as exc:  # the file's inputs do not fit the model
            shapes = ", ".join(str(tuple(x.shape)) for x in inputs)
            raise UnsupportedInputError(
                f"{type(model).__name__} does not run on the file's inputs ({shapes}): {first_line(exc)}"
            ) from exc
        ref, kind = ref if ref is not None else model, "float32"
    return ref, [[t.double().numpy() for _, t in p] for p in parts], kind


__all__ = [
    "BACKENDS",
    "DEFAULT_ATOL",
    "DEFAULT_K",
    "DEFAULT_RTOL",
    "DISCRETE_FRACTION",
    "LAYER_RTOL",
    "LEVELS",
    "SCHEMA",
    "LayerRecord",
    "LayerRow",
    "PRESETS",
    "ParityReport",
    "Preprocess",
    "ParityRow",
    "TensorSpec",
    "as_tensor",
    "check_parity",
    "default_batch_sizes",
    "prefetch",
    "read_signature",
]
