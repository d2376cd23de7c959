"""The paper's reference figures as data (ICLR 2021, Tables 1-4 and Section 5.4).

Pure data, no torch: every Params/MAdds cell of Tables 1-4 of "Revisiting Dynamic
Convolution via Matrix Decomposition", each row mapped to the ``create_model`` call
that builds it, and the paper's latency figures. :mod:`dcd_deploy.bench.complexity`
compares the cells with counted models; the latency bench prints
:data:`PAPER_LATENCY_MS` beside its own numbers.

Legend of :data:`PAPER_ROWS` (one :class:`PaperRow` per printed table row):

==================  =================================================================
table               "1a" MobileNetV2 x0.5 formulations, "1b" ResNet-18 formulations,
                    "2" latent dim L, "3a" diagonal blocks B, "3b" DCD per layer type,
                    "4a" MobileNetV2 main results, "4b" ResNet main results
row                 the row as printed (Λ, Φ, P, Q as in the paper)
model, kwargs       ``create_model(model, **kwargs)``
params, madds       the cells exactly as printed ("2.0M", "1.81G"); their last digit
                    fixes the precision a match is judged at
params_convention   "all": every parameter; "excl. classifier": the paper's ResNet
                    figures leave the classifier out (docs/design.md#counting-conventions: ResNet-18
                    11.1M = 11.69M minus its FC)
note                what the row assumes beyond the paper's text, or a known reason a
                    count cannot match
top1                Table 4 only: the ImageNet top-1 accuracy (%) as printed in the
                    paper's Table 4 (label tab:main_res); quoted, never measured here.
                    The static, DY-Conv and CondConv figures are the original papers'
==================  =================================================================

Tables 1-3 are MobileNetV2 x0.5 with DCD on the pointwise convs of the expansion
blocks only (``roles=("pw",)``, static classifier) unless the row says CLS or DW;
Table 1b is ResNet-18 with DCD on every block conv and a static classifier
(``roles=("conv",)``; its params exclude the classifier anyway). Table 4 uses each
family's default roles. The static, DY-Conv and CondConv figures of Table 4 are quoted
by the paper from the original papers (its footnote), so their counting conventions
are those papers'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

#: Params conventions (see the legend).
PARAMS_ALL = "all"
PARAMS_EXCL_CLASSIFIER = "excl. classifier"

#: Printed unit suffix -> millions.
UNIT_IN_M = {"M": 1.0, "G": 1000.0}

#: Model kinds, from the zoo name's suffix (``_dcd``, ``_dyconv``, ``_condconv``).
KINDS = ("static", "dcd", "dyconv", "condconv")

_FIGURE = re.compile(r"^(\d+)(?:\.(\d+))?([MG])$")


def parse_figure(text: str) -> tuple[float, float]:
    """A printed figure in millions, and half a unit of its last printed digit.

    Args:
        text: e.g. ``"2.0M"`` or ``"1.81G"``.

    Returns:
        ``(value_m, half_unit_m)``; ``"1.81G"`` gives ``(1810.0, 5.0)``.
    """
    match = _FIGURE.match(text)
    if match is None:
        raise ValueError(f"not a printed figure: {text!r}")
    whole, frac, unit = match.groups()
    frac = frac or ""
    scale = UNIT_IN_M[unit]
    value = float(f"{whole}.{frac}" if frac else whole) * scale
    return value, 0.5 * scale * 10.0 ** -len(frac)


@dataclass(frozen=True)
class PaperRow:
    """One printed row of Tables 1-4 (see the module legend)."""

    table: str
    row: str
    model: str
    kwargs: Mapping[str, Any]
    params: str
    madds: str
    params_convention: str = PARAMS_ALL
    note: str = ""
    top1: float | None = None

    @property
    def kind(self) -> str:
        """``static``, ``dcd``, ``dyconv`` or ``condconv``."""
        suffix = self.model.rsplit("_", 1)[-1]
        return suffix if suffix in KINDS else "static"

    @property
    def params_m(self) -> float:
        return parse_figure(self.params)[0]

    @property
    def madds_m(self) -> float:
        return parse_figure(self.madds)[0]


def _row(
    table: str,
    row: str,
    model: str,
    params: str,
    madds: str,
    *,
    note: str = "",
    convention: str = PARAMS_ALL,
    top1: float | None = None,
    **kwargs,
) -> PaperRow:
    return PaperRow(table, row, model, MappingProxyType(kwargs), params, madds, convention, note, top1)


# -- reasons and assumptions quoted by several rows --------------------------------------
_RESNET = PARAMS_EXCL_CLASSIFIER
_STRIDE_1X1 = (
    "stride in the first 1x1 (stride_in_1x1=True), the original ResNet-50 the "
    "paper's 3.8G counts; the authors' code puts it on the 3x3 (4.09G static)"
)
_BLOCKS = (
    "the paper does not say how L scales with B; here each block gets the latent dim "
    "the release gives a C/B-channel layer (Q, P grouped, Φ head B·L_b² wide)"
)
_DW = (
    "no released depthwise DCD exists; the zoo's is Eq. 7 (L_k = 4) with the release's "
    "branch for a C -> C layer (global pool, squeeze C / fc_squeeze, SE gate), an assumption"
)
_DYCONV_MBV2 = (
    "the paper (quoting DY-Conv's original figures) does not say which convs "
    "DY-Conv makes dynamic; the zoo makes every block conv dynamic and keeps the "
    "stem, the 1x1 head and the classifier static"
)
_RESNET10 = (
    "the paper does not define ResNet-10 (its static and DY-Conv figures are quoted "
    "from the original papers); the zoo's is BasicBlock x (1,1,1,1)"
)
_RESNET10_PARAMS = f"{_RESNET10}; its params excluding and including the classifier bracket the paper's figure"
_LAMBDA_ONLY = (
    "with Φ off the zoo's branch pools globally (Λ alone is SE-like channel "
    "attention; the release's 2x2 pool feeds Φ): an assumption fitted to Table 1's ΛW0 rows"
)
_RESNET50_DCD = (
    "params unexplained: the authors' ResNet-50 DCD has 29.84M with its DCD "
    "classifier (docs/design.md#release-format), under 30.7M with or without it"
)

_PW = ("pw",)
_MBV2 = "mobilenetv2_050"
_MBV2_DCD = "mobilenetv2_050_dcd"

#: Every Params/MAdds row of Tables 1-4, in the paper's order.
PAPER_ROWS: tuple[PaperRow, ...] = (
    # Table 1a: MobileNetV2 x0.5, DCD formulations on the pointwise convs.
    _row("1a", "W0 (static)", _MBV2, "2.0M", "97.0M"),
    _row("1a", "ΛW0", _MBV2_DCD, "2.4M", "97.4M", roles=_PW, channel_fusion=False),
    _row("1a", "W0+PΦQᵀ", _MBV2_DCD, "2.7M", "104.4M", roles=_PW, channel_attention=False),
    _row("1a", "ΛW0+PΦQᵀ", _MBV2_DCD, "2.9M", "104.6M", roles=_PW),
    # Table 1b: ResNet-18, DCD formulations on every block conv.
    _row("1b", "W0 (static)", "resnet18", "11.1M", "1.81G", convention=_RESNET),
    _row(
        "1b",
        "ΛW0",
        "resnet18_dcd",
        "11.7M",
        "1.81G",
        convention=_RESNET,
        note=_LAMBDA_ONLY,
        roles=("conv",),
        channel_fusion=False,
    ),
    _row(
        "1b", "W0+PΦQᵀ", "resnet18_dcd", "13.6M", "1.83G", convention=_RESNET, roles=("conv",), channel_attention=False
    ),
    _row("1b", "ΛW0+PΦQᵀ", "resnet18_dcd", "14.0M", "1.83G", convention=_RESNET, roles=("conv",)),
    # Table 2: latent dim multiplier on MobileNetV2 x0.5 (ΛW0+PΦQᵀ on the pointwise convs).
    _row("2", "static", _MBV2, "2.0M", "97.0M"),
    _row("2", "DCD L x0.25", _MBV2_DCD, "2.4M", "99.8M", roles=_PW, latent_mult=0.25),
    _row("2", "DCD L x0.50", _MBV2_DCD, "2.5M", "101.3M", roles=_PW, latent_mult=0.5),
    _row("2", "DCD L x0.75", _MBV2_DCD, "2.6M", "102.9M", roles=_PW, latent_mult=0.75),
    _row("2", "DCD L x1.0", _MBV2_DCD, "2.9M", "104.6M", roles=_PW, latent_mult=1.0),
    # Table 3a: diagonal blocks B of the dynamic residual, MobileNetV2 x0.5.
    _row("3a", "W0 (static)", _MBV2, "2.0M", "97.0M"),
    _row("3a", "W0+PΦQᵀ B=1", _MBV2_DCD, "2.7M", "104.4M", roles=_PW, channel_attention=False),
    _row(
        "3a", "W0+PΦQᵀ B=2", _MBV2_DCD, "2.6M", "101.0M", note=_BLOCKS, roles=_PW, channel_attention=False, num_blocks=2
    ),
    _row(
        "3a", "W0+PΦQᵀ B=4", _MBV2_DCD, "2.5M", "99.1M", note=_BLOCKS, roles=_PW, channel_attention=False, num_blocks=4
    ),
    _row(
        "3a", "W0+PΦQᵀ B=8", _MBV2_DCD, "2.5M", "98.5M", note=_BLOCKS, roles=_PW, channel_attention=False, num_blocks=8
    ),
    _row("3a", "ΛW0+PΦQᵀ B=1", _MBV2_DCD, "2.9M", "104.6M", roles=_PW),
    _row("3a", "ΛW0+PΦQᵀ B=2", _MBV2_DCD, "2.8M", "101.3M", note=_BLOCKS, roles=_PW, num_blocks=2),
    _row("3a", "ΛW0+PΦQᵀ B=4", _MBV2_DCD, "2.7M", "99.4M", note=_BLOCKS, roles=_PW, num_blocks=4),
    _row("3a", "ΛW0+PΦQᵀ B=8", _MBV2_DCD, "2.7M", "98.8M", note=_BLOCKS, roles=_PW, num_blocks=8),
    # Table 3b: DCD on depthwise (DW), pointwise (PW) and classifier (CLS) layers.
    _row("3b", "none (static)", _MBV2, "2.0M", "97.0M"),
    _row("3b", "DW", _MBV2_DCD, "2.4M", "97.5M", note=_DW, roles=("dw",)),
    _row("3b", "PW", _MBV2_DCD, "2.9M", "104.6M", roles=("pw",)),
    _row("3b", "CLS", _MBV2_DCD, "2.2M", "97.2M", roles=("cls",)),
    _row("3b", "DW+CLS", _MBV2_DCD, "2.6M", "97.7M", note=_DW, roles=("dw", "cls")),
    _row("3b", "DW+PW", _MBV2_DCD, "3.3M", "105.1M", note=_DW, roles=("dw", "pw")),
    _row("3b", "PW+CLS", _MBV2_DCD, "3.1M", "104.8M", roles=("pw", "cls")),
    _row("3b", "DW+PW+CLS", _MBV2_DCD, "3.5M", "105.3M", note=_DW, roles=("dw", "pw", "cls")),
    # Table 4a: MobileNetV2, default roles of each kind.
    _row("4a", "x1.0 static", "mobilenetv2_100", "3.5M", "300.0M", top1=72.0),
    _row("4a", "x1.0 DY-Conv", "mobilenetv2_100_dyconv", "11.1M", "312.9M", note=_DYCONV_MBV2, top1=75.2),
    _row("4a", "x1.0 CondConv", "mobilenetv2_100_condconv", "27.5M", "329.0M", top1=74.6),
    _row("4a", "x1.0 DCD", "mobilenetv2_100_dcd", "5.5M", "326.0M", top1=75.2),
    _row("4a", "x0.5 static", _MBV2, "2.0M", "97.0M", top1=65.4),
    _row("4a", "x0.5 DY-Conv", "mobilenetv2_050_dyconv", "4.0M", "101.4M", note=_DYCONV_MBV2, top1=69.9),
    _row("4a", "x0.5 CondConv", "mobilenetv2_050_condconv", "15.5M", "113.0M", top1=68.4),
    _row("4a", "x0.5 DCD", _MBV2_DCD, "3.1M", "104.8M", top1=70.2),
    _row("4a", "x0.35 static", "mobilenetv2_035", "1.7M", "59.2M", top1=60.3),
    _row("4a", "x0.35 DY-Conv", "mobilenetv2_035_dyconv", "2.8M", "62.0M", note=_DYCONV_MBV2, top1=65.9),
    _row("4a", "x0.35 DCD", "mobilenetv2_035_dcd", "2.3M", "63.1M", top1=66.6),
    # Table 4b: ResNet, default roles of each kind; params exclude the classifier.
    _row(
        "4b",
        "ResNet-50 static",
        "resnet50",
        "23.5M",
        "3.8G",
        convention=_RESNET,
        note=_STRIDE_1X1,
        stride_in_1x1=True,
        top1=76.2,
    ),
    _row(
        "4b",
        "ResNet-50 DCD",
        "resnet50_dcd",
        "30.7M",
        "3.9G",
        convention=_RESNET,
        note=f"{_STRIDE_1X1}; {_RESNET50_DCD}",
        stride_in_1x1=True,
        top1=77.9,
    ),
    _row("4b", "ResNet-18 static", "resnet18", "11.1M", "1.81G", convention=_RESNET, top1=70.4),
    _row("4b", "ResNet-18 DY-Conv", "resnet18_dyconv", "42.7M", "1.85G", convention=_RESNET, top1=72.7),
    _row("4b", "ResNet-18 DCD", "resnet18_dcd", "14.0M", "1.83G", convention=_RESNET, top1=73.1),
    _row("4b", "ResNet-10 static", "resnet10", "5.2M", "0.89G", convention=_RESNET, note=_RESNET10_PARAMS, top1=63.5),
    _row("4b", "ResNet-10 DY-Conv", "resnet10_dyconv", "18.6M", "0.91G", convention=_RESNET, note=_RESNET10, top1=67.7),
    _row("4b", "ResNet-10 DCD", "resnet10_dcd", "6.5M", "0.90G", convention=_RESNET, note=_RESNET10_PARAMS, top1=68.8),
)

#: Table 4 (tab:main_res), the paper's main results: the rows the accuracy-latency frontier
#: (``dcd-bench --frontier``) times, with each row's printed top-1 in ``PaperRow.top1``.
#: Family: "4a" MobileNetV2, "4b" ResNet.
TABLE4_FAMILIES: Mapping[str, str] = MappingProxyType({"4a": "MobileNetV2", "4b": "ResNet"})


def table4_rows() -> tuple[PaperRow, ...]:
    """The rows of Table 4, in the paper's order, each with its top-1."""
    return tuple(r for r in PAPER_ROWS if r.table in TABLE4_FAMILIES)


#: Where and how the paper timed its models (Section 5.4).
PAPER_LATENCY_SETUP = "AMD EPYC 7551P (2.0 GHz), one thread, PyTorch, batch 1, mean over 5,000 images"

#: The paper's running times in milliseconds (Section 5.4), per zoo width, static vs DCD
#: (Table 4 models: DCD on the pointwise convs and the classifier).
PAPER_LATENCY_MS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "mobilenetv2_050": MappingProxyType({"static": 91.0, "dcd": 104.0}),
        "mobilenetv2_100": MappingProxyType({"static": 146.0, "dcd": 163.0}),
    }
)
