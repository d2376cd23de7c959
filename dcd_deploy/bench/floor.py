"""The latency floor of a DCD model: what its dynamic parts cost before any is applied.

A DCD layer has to pool its input, run its branch FCs and (in the per-sample weight form)
build ``W(x)``, however ``W(x)`` is then applied. This module exports two timing-only
variants of a DCD model's deploy form and times them interleaved with the static model
and the real export, all in ONNX Runtime on one thread:

``branch``   every DCD layer computes its dynamic branch (pool, squeeze FC, gate, Λ and Φ
             heads) and then applies only its static ``W0`` (one Conv with BN folded);
``forming``  as ``branch``, and weight-form layers also build ``W(x) = Λ W0 + P Φ' Q``.

The dynamic values are tied to the logits through ``+ 0 · ReduceSum(Concat(...))`` so
ONNX Runtime cannot prune them (it does not fold a product with zero: NaN · 0 is NaN).
The outputs are therefore the static-``W0`` network's, not the DCD model's: these files
are for timing only. The ratio ``branch / static`` bounds from below what any way of
applying ``W(x)`` can reach on the machine measured (a fused kernel for the application
included) as long as the branch itself runs as these standard ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper
from torch import nn

from .._hooks import copy_model
from ..errors import UnsupportedInputError
from ..exporters import DeployDCD
from ..exporters.lowering import to_deploy
from ..exporters.onnx import DEFAULT_OPSET, build_onnx
from . import _stats
from ._table import Column, text_table
from ._timing import Timing
from .harness import check_arguments, fixed_input, pinned_threads, quiet, time_interleaved, timing_settings

STAGES = ("branch", "forming")
DEFAULT_FLOOR_MODELS = ("mobilenetv2_050_dcd", "mobilenetv2_100_dcd", "resnet18_dcd")
SCHEMA = "dcd-bench.floor/1"


class FloorDCD(nn.Module):
    """Emits a deploy-form DCD layer's dynamic parts, then applies only its static W0.

    Args:
        layer: the deploy-form layer.
        stage: ``branch`` or ``forming`` (see the module docstring).
        side: list the emitted dynamic tensors (2-D, batch first) are appended to.
    """

    def __init__(self, layer: DeployDCD, stage: str, side: list[str]):
        super().__init__()
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, not {stage!r}")
        self.layer, self.stage, self.side = layer, stage, side

    def forward(self, x):  # shapes for the exporter's shape propagation
        return self.layer(x)

    def emit(self, s, x: str, in_shape, out_shape) -> str:
        layer = self.layer
        y = layer.emit_branch(s, x, in_shape)
        lam = layer.emit_attention(s, y)
        phi = layer.emit_phi(s, y) if layer.channel_fusion else None
        self.side.extend(t for t in (lam, phi) if t is not None)
        if self.stage == "forming" and layer.strategy == "weight":
            weight, _ = layer.emit_weight(s, lam, phi)
            self.side.append(s.op("Flatten", [weight], axis=1))
        return layer.emit_static(s, x)  # W0 alone, as its kind has it


def floor_onnx(model: nn.Module, *, stage: str, input_size: int = 224, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The ``stage`` floor variant of ``model`` (eval mode) as an ONNX model, dynamic batch.

    ``to_deploy`` picks each layer's form as ``dcd-export`` does (strategy ``auto``).
    """
    deploy = to_deploy(model, input_size=input_size)
    floor = copy_model(deploy)
    side: list[str] = []
    layers = [(name, mod) for name, mod in floor.named_modules() if isinstance(mod, DeployDCD)]
    if not layers:
        raise UnsupportedInputError("the model has no DCD layer: it has no floor to measure")
    for name, mod in layers:
        parent, _, child = name.rpartition(".")
        setattr(floor.get_submodule(parent) if parent else floor, child, FloorDCD(mod, stage, side))
    proto = build_onnx(
        floor,
        input_size=input_size,
        batch=None,
        opset=opset,
        mode="standard",
        arch=getattr(model, "arch", type(model).__name__) + f"@floor-{stage}",
    )
    _tie_to_output(proto.graph, side)
    onnx.checker.check_model(proto)
    return proto


def _tie_to_output(graph: onnx.GraphProto, side: Sequence[str]) -> None:
    """Make the logits depend on every ``side`` tensor: ``logits + 0 · sum(concat(side))``."""
    final = next(n for n in graph.node if n.output[0] == graph.output[0].name)
    logits = final.input[0]
    graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "floor/zero"))
    graph.node.remove(final)
    graph.node.extend(
        [
            helper.make_node("Concat", list(side), ["floor/side"], axis=1, name="floor/Concat"),
            helper.make_node("ReduceSum", ["floor/side"], ["floor/sum"], keepdims=1, name="floor/ReduceSum"),
            helper.make_node("Mul", ["floor/sum", "floor/zero"], ["floor/nil"], name="floor/Mul"),
            helper.make_node("Add", [logits, "floor/nil"], [final.output[0]], name="floor/Add"),
        ]
    )


@dataclass
class FloorRecord:
    """One DCD model against its static partner (medians of interleaved runs, ms).

    ``*_ratio`` = that variant's median / the static model's median.
    """

    model: str
    static_model: str
    static_ms: float
    branch_ms: float
    forming_ms: float
    dcd_ms: float
    branch_ratio: float
    forming_ratio: float
    dcd_ratio: float
    runs: int


@dataclass
class FloorResult:
    """What :func:`run_floor` measured: one :class:`FloorRecord` per DCD model."""

    threads: int
    input_size: int
    records: list[FloorRecord] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.records)

    def to_dict(self) -> dict:
        from .._version import __version__

        return {
            "schema": SCHEMA,
            "version": __version__,
            "threads": self.threads,
            "input_size": self.input_size,
            "settings": dict(self.settings),
            "records": [asdict(r) for r in self.records],
        }


def run_floor(
    models: Sequence[str] = DEFAULT_FLOOR_MODELS,
    *,
    threads: int = 1,
    input_size: int = 224,
    quick: bool = False,
    runs: int | None = None,
    min_time: float | None = None,
    warmup: int | None = None,
    burst_s: float | None = None,
    seed: int = 0,
    trust_checkpoint: bool = False,
    workdir,
    progress: Callable[[str], None] = quiet,
) -> FloorResult:
    """Time static, ``branch``, ``forming`` and the real export of each DCD zoo model.

    Args:
        models: DCD zoo names (``X_dcd``) or checkpoints of DCD models; the static partner
            is the zoo's ``X`` (latency does not depend on the weights).
        threads: ONNX Runtime intra/inter-op threads (and PyTorch's while building and
            exporting; the caller's count is restored after).
        input_size: side of the square input.
        quick, runs, min_time, warmup, burst_s: as for
            :func:`~dcd_deploy.bench.latency.run_benchmark` (None: the default).
        seed: pseudo-training seed and input seed.
        trust_checkpoint: allow checkpoints that need full unpickling.
        workdir: directory the ONNX files are written to.
        progress: called with one line per step.
    """
    from ._runners import ort_runner

    timing = timing_settings(quick=quick, runs=runs, min_time=min_time, warmup=warmup, burst_s=burst_s)
    check_arguments(threads=threads, batch=1, input_size=input_size, timing=timing)
    with pinned_threads(threads):  # as run_benchmark: building and exporting at the count being timed
        x = fixed_input((1, 3, input_size, input_size), seed=seed).numpy()
        runners, pairs = {}, []
        for spec in models:
            name, static_name, files = _floor_files(
                spec,
                input_size=input_size,
                seed=seed,
                trust_checkpoint=trust_checkpoint,
                workdir=workdir,
                progress=progress,
            )
            for key, path in files.items():
                runners[(name, key)] = ort_runner(path, x, threads)
            pairs.append((name, static_name))
        timings = time_interleaved(runners, timing=timing, progress=progress, what="floor runners")
    settings = {
        "models": list(models),
        "seed": seed,
        "runs": timing["runs"],
        "min_time_s": timing["min_time"],
        "warmup": timing["warmup"],
        "quick": quick,
        "backend": "onnxruntime",
    }
    return FloorResult(threads=threads, input_size=input_size, settings=settings, records=floor_records(pairs, timings))


def _floor_files(
    spec: str, *, input_size: int, seed: int, trust_checkpoint: bool, workdir, progress: Callable[[str], None]
) -> tuple[str, str, dict]:
    """``spec``'s name, its static partner's zoo name, and ``{static, dcd, branch,
    forming: the ONNX file}`` written to ``workdir``."""
    from ..exporters.onnx import export_onnx
    from ..models import is_model
    from ._models import entry_name, load_model

    dcd, _ = load_model(spec, input_size=input_size, seed=seed, trust_checkpoint=trust_checkpoint)
    arch = getattr(dcd, "arch", "")
    static_name = arch[: -len("_dcd")] if arch.endswith("_dcd") else ""
    if not is_model(static_name):
        raise UnsupportedInputError(
            f"--floor takes DCD models (a zoo X_dcd or a checkpoint of one), "
            f"not {spec!r} ({arch or 'no architecture name'})"
        )
    static, _ = load_model(static_name, input_size=input_size, seed=seed)
    name = entry_name(spec)
    files = {"static": workdir / f"{name}.static.onnx", "dcd": workdir / f"{name}.onnx"}
    export_onnx(static, files["static"], input_size=input_size, check=False)
    export_onnx(dcd, files["dcd"], input_size=input_size, check=False)
    for stage in STAGES:
        files[stage] = workdir / f"{name}.floor-{stage}.onnx"
        onnx.save(floor_onnx(dcd, stage=stage, input_size=input_size), str(files[stage]))
    progress(f"[export] {name} ({arch}): static {static_name}, branch, forming, dcd")
    return name, static_name, files


def floor_records(pairs: Sequence[tuple[str, str]], timings: Mapping[tuple[str, str], Timing]) -> list[FloorRecord]:
    """One record per (DCD name, static name) from the timings keyed ``(name, static | branch |
    forming | dcd)``: medians, their ratios to the static median, the fewest runs of the four."""
    records = []
    for name, static_name in pairs:
        keys = ("static", *STAGES, "dcd")
        med = {k: _stats.summarize(timings[(name, k)].samples_ms).p50 for k in keys}
        records.append(
            FloorRecord(
                model=name,
                static_model=static_name,
                static_ms=med["static"],
                branch_ms=med["branch"],
                forming_ms=med["forming"],
                dcd_ms=med["dcd"],
                branch_ratio=med["branch"] / med["static"],
                forming_ratio=med["forming"] / med["static"],
                dcd_ratio=med["dcd"] / med["static"],
                runs=min(len(timings[(name, k)].samples_ms) for k in keys),
            )
        )
    return records


_FLOOR_COLUMNS = (
    Column("model", 22),
    Column("static ms", 9, ">"),
    Column("branch", 14, ">"),
    Column("+ forming W(x)", 16, ">"),
    Column("full DCD", 14, ">"),
    Column("runs", 5, ">"),
)


def format_floor_table(result: FloorResult) -> list[str]:
    """The floor table and its legend, as printed by ``dcd-bench --floor``."""
    rows = [
        [
            r.model,
            f"{r.static_ms:.2f}",
            f"{r.branch_ms:7.2f} x{r.branch_ratio:5.3f}",
            f"{r.forming_ms:9.2f} x{r.forming_ratio:5.3f}",
            f"{r.dcd_ms:7.2f} x{r.dcd_ratio:5.3f}",
            str(r.runs),
        ]
        for r in result.records
    ]
    return text_table(_FLOOR_COLUMNS, rows) + [
        "",
        "ONNX Runtime, one session per file, interleaved; ms = medians, xN = / the static model's median.",
        "branch: every DCD layer runs its dynamic branch (pool, FCs, gate, Λ/Φ heads) and applies only",
        "  its static W0; + forming W(x): weight-form layers also build W(x) = ΛW0 + PΦ'Q; full DCD: the",
        "  file dcd-export writes. Branch and forming files are for timing only (their logits are the",
        "  static-W0 network's); 'branch' is a floor no way of applying W(x) can go under on this machine.",
    ]


__all__ = [
    "DEFAULT_FLOOR_MODELS",
    "FloorDCD",
    "FloorRecord",
    "FloorResult",
    "STAGES",
    "floor_onnx",
    "floor_records",
    "format_floor_table",
    "run_floor",
]
