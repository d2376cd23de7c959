"""Parameter and multiply-add (MAdds) counts for any zoo model, and the paper check.

:func:`count_complexity` runs one shape-only forward pass (meta tensors) of a
``(1, 3, H, W)`` input (``H = W = S`` for a side ``S``) with forward hooks and adds up,
per executed layer, the multiply-adds below. A dynamic layer (:class:`~dcd_deploy.layers.DCDConv2d`,
:class:`~dcd_deploy.layers.DCDLinear`, :class:`~dcd_deploy.layers.MixtureConv2d`)
is counted as one unit from its attributes and the shapes it saw; its children are not
hooked. :func:`compare_with_paper` counts every model of Tables 1-4 and sets it beside
the paper's cells (:mod:`dcd_deploy.bench.paper`).

Counting conventions (one MAdd = one multiply-add, or one lone multiply or add where
stated). Notation: ``N = H·W`` input pixels, ``N' = H'·W'`` output pixels, ``k`` kernel
size, ``g`` groups, ``L`` latent dim, ``B`` diagonal blocks, ``L_k`` latent kernel
elements, ``K`` mixture kernels, ``S`` squeeze width.

=====================  ===============================================================
Static layers          identical in every form
  Conv1d / Conv2d      ``C_out · N' · C_in/g · k²``
  Linear               ``in · out`` per row
  average pooling      one add per element of every window (adaptive pools use
                       PyTorch's exact, possibly overlapping windows; a global pool
                       is ``C·H·W``)
  not counted          BatchNorm (folds into the conv next to it), activations, max
                       pooling (comparisons), dropout, bias and residual additions, as
                       in the usual MobileNetV2 300M / ResNet-18 1.8G figures
Dynamic branch         identical in every form: pooling as above (also reported apart
                       as ``branch_pool_madds``), every FC as Linear, the SE gate's
                       product ``y · hsig(Ay)`` as ``S`` multiplies
DCD "latent" form      as the layer's forward executes it, per output pixel:
  1x1 / k x k          W0 conv + ``C_out`` (Λ scaling) + Q conv ``C_in·L/B`` + Φ
  channel fusion       ``L²/B`` + P conv ``L·C_out/B``; Q carries the conv's stride
  depthwise (Eq. 7)    W0 conv + ``C`` (Λ) + R conv ``C·L_k·k²`` + Φ ``C·L_k²`` + P
                       weighting ``C·L_k``
  joint (Eq. 8)        W0 conv + ``C_out`` (Λ) + R conv ``L·L_k·k²`` + Φ ``L²·L_k`` + P
                       conv ``L·C_out``, and Q conv ``C_in·L`` per *input* pixel (it
                       runs before the strided R conv)
  release latent BNs   bn1 folds into Q; bn2 and the identity fold into Φ (``L²`` per
                       sample, not counted)
DCD "weight" form      build ``W(x)`` once per sample, then one conv ``C_out·N'·C_in/g·k²``:
  1x1 / k x k          Λ ⊙ W0 ``C_out·C_in·k²`` + PΦ ``C_out·L²/B²`` + (PΦ)Qᵀ
  channel fusion       ``C_out·L·C_in/B²`` (B blocks of sizes /B; added to the centre
                       tap for k x k)
  depthwise (Eq. 7)    Λ ⊙ W0 ``C·k²`` + PΦ ``C·L_k²`` + (PΦ)Rᵀ ``C·L_k·k²``
  joint (Eq. 8)        Λ ⊙ W0 ``C_out·C_in·k²`` + Φ ×₃ R ``L²·L_k·k²`` + ×₁ P
                       ``C_out·L²·k²`` + ×₂ Q ``C_out·L·C_in·k²``
  DCDLinear            counted in the latent form: at 1x1 resolution forming ``W(x)``
                       (``C_out·C_in·L``) always costs more than applying it
DCD "min" form         per DCD layer the cheaper of its latent and weight counts, what
                       a deployment picking a path per layer executes; the paper's own
                       remark that Λ costs ``min(O(C²), O(HWC))`` (Section 3.3) and its
                       Table 4 DCD figures fit this form
DY-Conv / CondConv     identical in every form, as executed (paper Eq. 1): kernel
                       aggregation ``K · numel(W)`` (plus ``K·C_out`` for biases) + one
                       conv + the routing branch (global pool, FCs)
Switched-off terms     dropped (no Λ: no Λ terms; no Φ: no Q, Φ, P, R terms)
=====================  ===============================================================

Parameters are ``sum(p.numel() for p in model.parameters())`` (BN affine included,
running statistics excluded); ``classifier_params`` lets a caller apply the paper's
ResNet convention (parameters excluding the classifier, docs/design.md#counting-conventions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch
from torch import nn
from torch.func import functional_call

from .._meta import FastMeta, like
from .._modes import evaluating
from ..exporters import deploy_kind
from ..layers import DCDConv2d, DCDLinear, MixtureConv2d
from ..layers.common import SEGate
from ..models import create_model
from .harness import input_hw
from .paper import PAPER_ROWS, PARAMS_EXCL_CLASSIFIER, PaperRow, parse_figure

#: MAdd forms; legend: "latent" as DCD's forward executes, "weight" per-sample W(x),
#: "min" per DCD layer the cheaper of the two.
FORMS = ("latent", "weight", "min")
#: Default square input side (ImageNet evaluation).
DEFAULT_INPUT_SIZE = 224
#: Input channels of every zoo model.
IMAGE_CHANNELS = 3
#: Counts are reported in millions.
MILLION = 1e6
#: Allowed deviation from the paper per model kind, in percent (either cell).
TOLERANCE_PCT: Mapping[str, float] = MappingProxyType({"static": 2.0, "dcd": 5.0, "dyconv": 10.0, "condconv": 10.0})
#: Row statuses; legend: "ok" both cells within tolerance (or equal at the paper's
#: printed precision), "miss" otherwise (the row's note says what is known about why).
STATUS_OK, STATUS_MISS = "ok", "miss"

# Module types whose forward costs no counted MAdds (see the module docstring).
_FREE = (
    nn.modules.batchnorm._BatchNorm,
    nn.ReLU,
    nn.ReLU6,
    nn.Sigmoid,
    nn.Hardsigmoid,
    nn.Hardswish,
    nn.SiLU,
    nn.Softmax,
    nn.Dropout,
    nn.Identity,
    nn.Flatten,
    nn.MaxPool2d,
    nn.AdaptiveMaxPool2d,
)
_DYNAMIC = (DCDConv2d, DCDLinear, MixtureConv2d)
_DCD_NAMES = {DCDConv2d.__name__, DCDLinear.__name__}
_COUNTED = (nn.Conv1d, nn.Conv2d, nn.Linear, nn.AdaptiveAvgPool2d, nn.AvgPool2d)


@dataclass(frozen=True)
class LayerCost:
    """Totals for one layer type.

    Attributes:
        count: modules of this type outside dynamic layers (a dynamic layer is one unit).
        params: their parameters.
        madds_latent: their MAdds in the latent form, summed over calls.
        madds_weight: their MAdds in the weight form, summed over calls.
        madds_min: their MAdds in the min form, summed over calls.
    """

    count: int = 0
    params: int = 0
    madds_latent: int = 0
    madds_weight: int = 0
    madds_min: int = 0

    def __add__(self, other: LayerCost) -> LayerCost:
        return LayerCost(
            self.count + other.count,
            self.params + other.params,
            self.madds_latent + other.madds_latent,
            self.madds_weight + other.madds_weight,
            self.madds_min + other.madds_min,
        )


@dataclass(frozen=True)
class Complexity:
    """Parameters and MAdds of a model for one input size.

    Attributes:
        params: all parameters.
        madds_latent: MAdds, every DCD layer in the latent form (as executed).
        madds_weight: MAdds, every DCD conv in the per-sample weight form.
        madds_min: MAdds, every DCD layer in the cheaper of the two.
        branch_pool_madds: the dynamic branches' pooling adds (included in all three).
        classifier_params: parameters of ``model.classifier`` (0 if it has none).
        input_size: side S of the (1, C, S, S) input counted, or (H, W) of a
            (1, C, H, W) one.
        breakdown: per layer type (class name), a :class:`LayerCost`; read-only.
    """

    params: int
    madds_latent: int
    madds_weight: int
    madds_min: int
    branch_pool_madds: int
    classifier_params: int
    input_size: int | tuple[int, int]
    breakdown: Mapping[str, LayerCost]

    @property
    def params_excl_classifier(self) -> int:
        """Parameters without the classifier (the paper's ResNet convention)."""
        return self.params - self.classifier_params

    def madds(self, form: str) -> int:
        """MAdds in ``form``, one of :data:`FORMS`."""
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, not {form!r}")
        return {"latent": self.madds_latent, "weight": self.madds_weight, "min": self.madds_min}[form]


class _Cost(NamedTuple):
    """MAdds of one call of a counted unit, one sample."""

    latent: int
    weight: int
    branch_pool: int = 0


# -- per-layer formulas ------------------------------------------------------------------
#: Version of the JSON layout of :func:`complexity_document` (2: an object, was a bare list).
SCHEMA = "dcd-bench.complexity/2"


def _pixels(shape: torch.Size) -> int:
    """H·W of an (B, C, H, W) shape; 1 for anything with fewer dims."""
    return int(shape[-2] * shape[-1]) if len(shape) == 4 else 1


def _adaptive_windows(size_in: int, size_out: int) -> int:
    """Sum of PyTorch's adaptive-pool window lengths along one axis."""
    return sum(-(-(i + 1) * size_in // size_out) - (i * size_in // size_out) for i in range(size_out))


def _adaptive_pool_adds(in_shape: torch.Size, out_h: int, out_w: int) -> int:
    return in_shape[1] * _adaptive_windows(in_shape[-2], out_h) * _adaptive_windows(in_shape[-1], out_w)


def _pool_adds(pool: nn.Module, in_shape: torch.Size, out_shape: torch.Size) -> int:
    """Adds of a static average pool: one per element of every window."""
    if isinstance(pool, nn.AdaptiveAvgPool2d):
        return _adaptive_pool_adds(in_shape, out_shape[-2], out_shape[-1])
    k = pool.kernel_size
    kh, kw = (k, k) if isinstance(k, int) else k
    return in_shape[1] * kh * kw * _pixels(out_shape)


def _conv_madds(conv: nn.Module, out_positions: int) -> int:
    """``C_out · N' · C_in/g · prod(k)`` for a Conv1d/Conv2d."""
    per_output = conv.in_channels // conv.groups
    for k in conv.kernel_size:
        per_output *= k
    return conv.out_channels * out_positions * per_output


def _fc_madds(modules: Iterable[nn.Module | None]) -> int:
    """MAdds of every Linear inside ``modules`` (one row), plus SE-gate products."""
    total = 0
    for module in modules:
        if module is None:
            continue
        for m in module.modules():
            if isinstance(m, nn.Linear):
                total += m.in_features * m.out_features
            elif isinstance(m, SEGate):
                total += m.fc[0].out_features
    return total


def _dcd_cost(layer: DCDConv2d | DCDLinear, in_shape: torch.Size, out_shape: torch.Size) -> _Cost:
    """The layer's kind counts its latent and weight forms; the branch is the same in both."""
    conv = isinstance(layer, DCDConv2d)
    pool = _adaptive_pool_adds(in_shape, layer.pool_size, layer.pool_size) if conv else 0
    branch = pool + _fc_madds((layer.fc, layer.fc_phi, layer.fc_scale))
    latent, weight = deploy_kind(layer).madds(layer, _pixels(in_shape), _pixels(out_shape))
    return _Cost(latent + branch, weight + branch, pool)


def _mixture_cost(layer: MixtureConv2d, in_shape: torch.Size, out_shape: torch.Size) -> _Cost:
    numel = layer.out_channels * (layer.in_channels // layer.groups) * layer.kernel_size**2
    total = layer.num_kernels * numel + numel * _pixels(out_shape)  # aggregate, one conv
    if layer.bias is not None:
        total += layer.num_kernels * layer.out_channels
    pool = in_shape[1] * _pixels(in_shape)  # global average pool
    total += pool + _fc_madds(m for name, m in layer.named_children() if name != "pool")
    return _Cost(total, total, pool)


def _unit_cost(module: nn.Module, in_shape: torch.Size, out_shape: torch.Size) -> _Cost:
    if isinstance(module, (DCDConv2d, DCDLinear)):
        return _dcd_cost(module, in_shape, out_shape)
    if isinstance(module, MixtureConv2d):
        return _mixture_cost(module, in_shape, out_shape)
    if isinstance(module, nn.Conv1d):
        cost = _conv_madds(module, out_shape[-1])
    elif isinstance(module, nn.Conv2d):
        cost = _conv_madds(module, _pixels(out_shape))
    elif isinstance(module, nn.Linear):
        cost = module.in_features * module.out_features * (out_shape.numel() // module.out_features)
    else:
        cost = _pool_adds(module, in_shape, out_shape)
    return _Cost(cost, cost)


def _units(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """(counted units, cost-free modules), neither inside a dynamic layer.

    Raises:
        TypeError: a module with its own parameters that no rule covers.
    """
    units, free, owned = [], [], set()
    for m in model.modules():
        if id(m) in owned:
            continue
        if isinstance(m, _DYNAMIC):
            units.append(m)
            owned.update(id(c) for c in m.modules())
        elif isinstance(m, _COUNTED):
            units.append(m)
        elif isinstance(m, _FREE):
            free.append(m)
        elif any(True for _ in m.parameters(recurse=False)):
            raise TypeError(f"count_complexity has no rule for {type(m).__name__}")
    return units, free


def _shape_only_forward(model: nn.Module, hw: tuple[int, int], in_channels: int) -> None:
    """Run ``model`` once on meta tensors: shapes flow, nothing is computed or changed."""
    meta = {name: t if t.is_meta else like(t) for name, t in (*model.named_parameters(), *model.named_buffers())}
    x = torch.empty(1, in_channels, *hw, device="meta")
    with FastMeta():
        functional_call(model, meta, (x,))


def _count_calls(
    model: nn.Module,
    units: list[nn.Module],
    add: Callable[[str, LayerCost], None],
    *,
    hw: tuple[int, int],
    in_channels: int,
) -> int:
    """Add every unit's MAdds per call of one shape-only forward; returns the branch pooling adds."""
    branch_pool = 0

    def hook(mod: nn.Module, inputs, output) -> None:
        nonlocal branch_pool
        cost = _unit_cost(mod, inputs[0].shape, output.shape)  # batch is 1
        branch_pool += cost.branch_pool
        add(type(mod).__name__, LayerCost(0, 0, cost.latent, cost.weight, min(cost.latent, cost.weight)))

    handles = [m.register_forward_hook(hook) for m in units]
    try:
        with torch.no_grad(), evaluating(model):  # every submodule's own mode back after
            _shape_only_forward(model, hw, in_channels)
    finally:
        for h in handles:
            h.remove()
    return branch_pool


def count_complexity(
    model: nn.Module, *, input_size: int | tuple[int, int] = DEFAULT_INPUT_SIZE, in_channels: int = IMAGE_CHANNELS
) -> Complexity:
    """Count parameters and MAdds (every form) of ``model`` on one (1, C, H, W) input.

    The model runs once in eval mode on meta tensors (shapes only; its weights, buffers
    and mode are left as they were); every counted layer's cost comes from the shapes
    it saw, so a layer that runs twice counts twice and one never run counts nothing.

    Args:
        model: a zoo model, or any module built from ``torch.nn`` convs, linears,
            pools and this package's dynamic layers (on any device, meta included).
        input_size: side S of a square input, or its (H, W).
        in_channels: C, the input's channels (3 for every zoo model).

    Returns:
        A :class:`Complexity`; the conventions are in this module's docstring.

    Raises:
        UnsupportedInputError: the model cannot take ``input_size``.
        TypeError: the model holds a parameterised layer these rules do not cover.
    """
    hw = input_hw(input_size)
    check = getattr(model, "check_input_size", None)
    if callable(check):
        for side in dict.fromkeys(hw):  # the zoo's models take one side at a time
            check(side)
    units, free = _units(model)
    totals: dict[str, LayerCost] = {}

    def add(name: str, cost: LayerCost) -> None:
        totals[name] = totals.get(name, LayerCost()) + cost

    for m in units:  # a unit owns everything under it
        add(type(m).__name__, LayerCost(1, sum(p.numel() for p in m.parameters())))
    for m in free:
        add(type(m).__name__, LayerCost(1, sum(p.numel() for p in m.parameters(recurse=False))))
    branch_pool = _count_calls(model, units, add, hw=hw, in_channels=in_channels)

    params = sum(p.numel() for p in model.parameters())
    unattributed = params - sum(c.params for c in totals.values())
    if unattributed:  # a parameter shared by several layers is counted by each of them
        add("shared", LayerCost(0, unattributed))
    classifier = getattr(model, "classifier", None)
    cls_params = sum(p.numel() for p in classifier.parameters()) if isinstance(classifier, nn.Module) else 0
    return Complexity(
        params=params,
        madds_latent=sum(c.madds_latent for c in totals.values()),
        madds_weight=sum(c.madds_weight for c in totals.values()),
        madds_min=sum(c.madds_min for c in totals.values()),
        branch_pool_madds=branch_pool,
        classifier_params=cls_params,
        input_size=hw[0] if hw[0] == hw[1] else hw,
        breakdown=dict(sorted(totals.items())),
    )


# -- the paper check -----------------------------------------------------------------------
@dataclass(frozen=True)
class PaperCheck:
    """One paper row beside our count (figures in millions, deviations in percent).

    ``madds_m`` is in ``madds_form``: "min" for rows with DCD layers (the paper's
    convention, see the module docstring), "any" where every form coincides.
    """

    paper: PaperRow
    complexity: Complexity
    params_m: float
    madds_m: float
    madds_form: str
    params_dev_pct: float
    madds_dev_pct: float
    tolerance_pct: float
    status: str

    def to_record(self) -> dict:
        """The JSON record of this row (plain types only)."""
        c, p = self.complexity, self.paper
        return {
            "table": p.table,
            "row": p.row,
            "model": p.model,
            "kwargs": {k: list(v) if isinstance(v, tuple) else v for k, v in p.kwargs.items()},
            "params_m": self.params_m,
            "madds_m": self.madds_m,
            "paper_params_m": p.params_m,
            "paper_madds_m": p.madds_m,
            "params_dev_pct": self.params_dev_pct,
            "madds_dev_pct": self.madds_dev_pct,
            "madds_form": self.madds_form,
            "params_convention": p.params_convention,
            "status": self.status,
            "note": p.note,
            "tolerance_pct": self.tolerance_pct,
            "params_all_m": c.params / MILLION,
            "madds_latent_m": c.madds_latent / MILLION,
            "madds_weight_m": c.madds_weight / MILLION,
            "madds_min_m": c.madds_min / MILLION,
            "branch_pool_m": c.branch_pool_madds / MILLION,
            "input_size": c.input_size,
        }


def _deviation_pct(ours: float, paper: float) -> float:
    return 100.0 * (ours - paper) / paper


def _within(ours: float, printed: str, tolerance_pct: float) -> bool:
    """Within tolerance, or equal to the printed figure at its printed precision."""
    paper, half_unit = parse_figure(printed)
    return abs(_deviation_pct(ours, paper)) <= tolerance_pct or abs(ours - paper) <= half_unit


def check_row(row: PaperRow, complexity: Complexity) -> PaperCheck:
    """Set one counted model beside its paper row.

    Args:
        row: the paper's row.
        complexity: the count of ``create_model(row.model, **row.kwargs)``.
    """
    params = complexity.params_excl_classifier if row.params_convention == PARAMS_EXCL_CLASSIFIER else complexity.params
    form = "min" if _DCD_NAMES & complexity.breakdown.keys() else "any"
    params_m, madds_m = params / MILLION, complexity.madds_min / MILLION
    tol = TOLERANCE_PCT[row.kind]
    ok = _within(params_m, row.params, tol) and _within(madds_m, row.madds, tol)
    return PaperCheck(
        paper=row,
        complexity=complexity,
        params_m=params_m,
        madds_m=madds_m,
        madds_form=form,
        params_dev_pct=_deviation_pct(params_m, row.params_m),
        madds_dev_pct=_deviation_pct(madds_m, row.madds_m),
        tolerance_pct=tol,
        status=STATUS_OK if ok else STATUS_MISS,
    )


def compare_with_paper(
    *,
    rows: Iterable[PaperRow] = PAPER_ROWS,
    input_size: int = DEFAULT_INPUT_SIZE,
    create: Callable[..., nn.Module] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[PaperCheck]:
    """Count every model of ``rows`` (each distinct one built once, on meta) and check it.

    Args:
        rows: paper rows; default every row of Tables 1-4.
        input_size: side of the square input (the paper's figures are for 224).
        create: model factory, default :func:`dcd_deploy.create_model`.
        progress: called with one line per model counted (``[count] 3/35 resnet18_dcd``).

    Returns:
        One :class:`PaperCheck` per row, in order.
    """
    import time

    create = create or create_model
    rows = list(rows)
    distinct = len({(r.model, tuple(sorted(r.kwargs.items()))) for r in rows})
    counted: dict[tuple, Complexity] = {}
    checks = []
    started = time.perf_counter()
    for row in rows:
        key = (row.model, tuple(sorted(row.kwargs.items())))
        if key not in counted:
            with torch.device("meta"), FastMeta():  # no weights drawn, no memory, global RNG untouched
                model = create(row.model, **row.kwargs)
            counted[key] = count_complexity(model, input_size=input_size)
            if progress is not None:
                config = " ".join(f"{k}={v}" for k, v in key[1])
                progress(
                    f"[count] {len(counted)}/{distinct} {row.model}{' ' + config if config else ''} "
                    f"({time.perf_counter() - started:.0f} s)"
                )
        checks.append(check_row(row, counted[key]))
    return checks


def complexity_document(checks: Sequence[PaperCheck], *, input_size: int) -> dict:
    """The ``--complexity --json`` document: schema, version, the input size counted at and
    one record per paper row (:meth:`PaperCheck.to_record`)."""
    from .._version import __version__

    return {
        "schema": SCHEMA,
        "version": __version__,
        "input_size": input_size,
        "records": [c.to_record() for c in checks],
    }
