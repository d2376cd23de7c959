"""The parity report: one row per (runtime, batch size, output), and its verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ._layerwise import DYNAMIC_KINDS, KINDS, LayerRow

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-3
#: How many times PyTorch's own fp32 error (against float64) the export may be off.
DEFAULT_K = 10.0
#: The share of a bool or integer output's elements that may differ from the float64
#: reference (decisions on floats within rounding of their threshold; see
#: ``_compare._compare_discrete``). A decision flips under reordered fp32 sums only for
#: values within ~1e-6 of its threshold: about one element in 1e6 for a sigmoid mask of
#: unit-scale logits, so 1e-4 leaves a 100x margin, while a wrong weight flips a share
#: of 1e-3 or more.
DISCRETE_FRACTION = 1e-4
#: A FAIL in which every layer is out of bound, the first one by at least this much (not
#: rounding: a layer is checked on its own inputs), is most likely a file of other weights
#: than the model it is checked against (:attr:`ParityReport.other_weights_likely`).
OTHER_WEIGHTS_REL = 0.1
#: Version of the layout of :meth:`ParityReport.to_dict` (``dcd-validate --json``).
SCHEMA = "dcd-validate.parity/1"  # fields are only added: readers of /1 still work


@dataclass
class ParityRow:
    """One (runtime and optimisation level, batch size, output) comparison; errors are
    against the reference.

    Attributes:
        optimization: ONNX Runtime's level (``disabled``, ``all``) or ``openvino``.
        max_abs: max |onnx - reference| over finite values (``err_onnx``).
        max_rel: ``max_abs / scale``.
        torch_fp32_abs: max |PyTorch fp32 - reference| (``err_torch``): what fp32
            achieves on these inputs at all.
        scale: the reference's max magnitude.
        tolerance: the bound ``max_abs`` was held to.
        ill_conditioned: ``err_torch`` alone exceeds ``atol + rtol * scale`` (and the
            default ``atol``, so a tolerance set to zero does not call every model so).
        output: the file's output this row compares (its ONNX name).
        classifier: the output is (N, classes), so top-1 agreement means something.
        nonfinite_replaced: values PyTorch has as NaN or Inf and the runtime (OpenVINO)
            turned into numbers; not compared.
        discrete: a bool or integer output, compared by the share of its elements that
            differ (``max_abs``, ``max_rel``, ``mean_abs``, ``torch_fp32_abs`` and
            ``tolerance`` are such shares, ``scale`` is 1).
        elements: a discrete output's element count over the row's inputs.
        differ: how many of them differ from the reference.
    """

    optimization: str
    batch_size: int
    n_inputs: int
    max_abs: float
    max_rel: float
    mean_abs: float
    torch_fp32_abs: float
    scale: float
    tolerance: float
    ill_conditioned: bool
    top1_agreement: float
    top1_mismatches: int
    nonfinite: int
    nonfinite_match: bool
    passed: bool
    backend: str = "onnxruntime"
    output: str = ""
    classifier: bool = True
    nonfinite_replaced: int = 0
    discrete: bool = False
    elements: int = 0
    differ: int = 0

    @property
    def torch_fp32_rel(self) -> float:
        return self.torch_fp32_abs / self.scale if self.scale else 0.0

    @property
    def badness(self) -> float:
        """How close to (or far past) its tolerance this row is: ``max_abs / tolerance``."""
        if not self.passed and self.max_abs <= self.tolerance:
            return float("inf")  # failed on non-finite values or top-1
        return self.max_abs / self.tolerance if self.tolerance else (0.0 if not self.max_abs else float("inf"))


@dataclass
class ParityReport:
    """Result of :func:`~dcd_deploy.check_parity`; truthy when its :attr:`verdict` is PASS.

    The verdict (docs/design.md#parity): FAIL when any layer is out of its bound (the
    first one in graph order is named) or any end-to-end row fails; else PASS when the
    end-to-end comparison has power (PyTorch fp32 is within ``atol + rtol * scale`` of
    float64 on every row), or when it has none but the dynamic layers were checked on
    their own ("decided layer by layer"); else INCONCLUSIVE, a PASS only with
    ``accept_inconclusive``.

    Attributes:
        input_size: the image input's side (square), ``[H, W]``, or None for a file
            without an image input.
        reference: ``float64`` (a float64 copy of the model) or ``float32`` when the model
            cannot run in float64 (then ``err_torch`` is 0 and the classic bound decides).
        synthetic_inputs: the inputs were the built-in synthetic ones, not the caller's.
        outputs: the file's outputs, in order (one row per output per comparison).
        layers: the layer-wise rows, runtime by runtime, each in graph order.
        layer_record: the file records its layers (so they were checked).
        accept_inconclusive: an end-to-end comparison without power may pass when no
            dynamic layer was checked on its own.
        preprocess: the preprocessing the built-in images went through
            (:class:`~dcd_deploy.preprocess.Preprocess` as a dict); None for the caller's inputs.
    """

    onnx_path: str
    input_size: int | list | None
    atol: float
    rtol: float
    rows: list[ParityRow] = field(default_factory=list)
    k: float = DEFAULT_K
    reference: str = "float64"
    synthetic_inputs: bool = True
    outputs: list[str] = field(default_factory=list)
    layers: list[LayerRow] = field(default_factory=list)
    layer_record: bool = False
    accept_inconclusive: bool = False
    preprocess: dict | None = None

    def __bool__(self) -> bool:
        return self.verdict == "PASS"

    @property
    def end_to_end_passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    @property
    def inconclusive(self) -> bool:
        """The end-to-end comparison has no power here: PyTorch fp32 itself is off float64
        by more than the classic bound, so a wrong file could pass it as well as a right one."""
        return self.ill_conditioned

    @property
    def first_failing_layer(self) -> LayerRow | None:
        """The first layer out of bound in graph order (over every runtime checked)."""
        order = {p: i for i, p in enumerate(dict.fromkeys(r.path for r in self.layers))}
        bad = [r for r in self.layers if not r.passed]
        return min(bad, key=lambda r: order[r.path]) if bad else None

    @property
    def other_weights_likely(self) -> bool:
        """Every layer out of bound, the first by more than :data:`OTHER_WEIGHTS_REL`: the
        file most likely holds other weights than the model (another checkpoint, or a model
        left at its random initialisation)."""
        first = self.first_failing_layer
        return (
            first is not None
            and first.max_rel >= OTHER_WEIGHTS_REL
            and len({r.path for r in self.layers if not r.passed}) == len({r.path for r in self.layers})
        )

    @property
    def dynamic_layers_checked(self) -> int:
        return len({r.path for r in self.layers if r.kind in DYNAMIC_KINDS})

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``INCONCLUSIVE`` (see the class docstring)."""
        if not self.rows or not self.end_to_end_passed or self.first_failing_layer is not None:
            return "FAIL"
        if self.inconclusive and not self.dynamic_layers_checked and not self.accept_inconclusive:
            return "INCONCLUSIVE"
        return "PASS"

    @property
    def decided_by(self) -> str:
        """What the verdict rests on: ``end to end``, ``layers``, ``accepted`` or ``layer`` (a
        layer FAIL)."""
        if self.first_failing_layer is not None:
            return "layer"
        if not self.inconclusive or not self.end_to_end_passed:
            return "end to end"
        return "layers" if self.dynamic_layers_checked else "accepted" if self.accept_inconclusive else "nothing"

    @property
    def passed(self) -> bool:
        return bool(self)

    @property
    def max_abs(self) -> float:
        return max((r.max_abs for r in self.rows), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((r.max_rel for r in self.rows), default=0.0)

    @property
    def torch_fp32_rel(self) -> float:
        """PyTorch fp32's worst error against the reference, relative to the output scale."""
        return max((r.torch_fp32_rel for r in self.rows), default=0.0)

    @property
    def ill_conditioned(self) -> bool:
        return any(r.ill_conditioned for r in self.rows)

    @property
    def worst_output(self) -> str:
        """The output furthest past (or closest to) its tolerance."""
        return max(self.rows, key=lambda r: r.badness).output if self.rows else ""

    def conditioning_note(self) -> str:
        """One sentence on fp32's own accuracy here ('' when it is unremarkable)."""
        if not self.ill_conditioned:
            return ""
        return (
            f"fp32 itself is ill-conditioned on these inputs (PyTorch fp32 is "
            f"{self.torch_fp32_rel:.2g} of the output scale off float64)"
        )

    def summary(self) -> str:
        verdict = self.verdict
        first = self.first_failing_layer
        if first is not None:
            where = "" if len({(r.backend, r.optimization) for r in self.layers}) == 1 else f" in {_runtime(first)}"
            bad = len({r.path for r in self.layers if not r.passed})
            return (
                f"FAIL at {first.path} ({first.label}): max rel {first.max_rel:.2g} > {first.bound_rel:.2g}"
                f"{where}{'; ' + first.note if first.note else ''}; {bad} of "
                f"{len({r.path for r in self.layers})} layers out of bound; end to end "
                f"{'passed' if self.end_to_end_passed else 'failed'}: {self._end_to_end()}"
            )
        if verdict == "FAIL" or (not self.inconclusive):
            layers = f"; {self._layers_note()}" if self.layers else ""
            return f"{verdict}: {self._end_to_end()}{layers}"
        why = (
            f"end to end inconclusive, fp32 is {self.torch_fp32_rel:.2g} of scale off float64 on these "
            f"{'images' if self.input_size is not None else 'inputs'}"
        )
        if self.decided_by == "layers":
            return f"PASS (decided layer by layer: {self._layers_note()}; {why})"
        nothing = (
            "no dynamic layer was checked on its own"
            if self.layer_record
            else "the file records no layers to check on their own"
        )
        if verdict == "PASS":
            return f"PASS (accepted inconclusive: {why}; {nothing})"
        return (
            f"INCONCLUSIVE: {why}, and {nothing}; not a PASS: check on inputs from the model's working "
            f"range, or accept explicitly (--accept-inconclusive)"
        )

    def _end_to_end(self) -> str:
        """The end-to-end numbers (the worst output's, when there are several)."""
        rows = self.rows
        several = len(set(r.output for r in rows)) > 1
        if several:
            worst = self.worst_output
            rows = [r for r in rows if r.output == worst]
        where = (
            f"worst output {worst!r} of {len(self.outputs) or len(set(r.output for r in self.rows))}: "
            if several
            else ""
        )
        if rows and all(r.discrete for r in rows):
            return where + self._discrete(rows)
        max_abs = max((r.max_abs for r in rows), default=0.0)
        max_rel = max((r.max_rel for r in rows), default=0.0)
        fp32_rel = max((r.torch_fp32_rel for r in rows), default=0.0)
        classifier = [r for r in self.rows if r.classifier]
        # top-1 is evidence only where the comparison has power
        top1 = (
            f", top-1 agreement {min(r.top1_agreement for r in classifier):.0%}"
            if classifier and not self.inconclusive
            else ""
        )
        nonfinite = sum(r.nonfinite for r in self.rows)
        replaced = sum(r.nonfinite_replaced for r in self.rows)
        nonfinite -= replaced
        extra = (
            f", {nonfinite} non-finite values propagated identically"
            if nonfinite and all(r.nonfinite_match for r in self.rows)
            else ", non-finite values differ"
            if nonfinite
            else ""
        )
        if replaced:
            extra += (
                f", {replaced} NaN/Inf outputs became numbers in OpenVINO (not compared: its CPU "
                f"plugin does not keep NaN)"
            )
        note = self.conditioning_note()
        flips = self._flips()
        return (
            f"{where}max abs {max_abs:.3g}, max rel {max_rel:.3g} against {self.reference} "
            f"(PyTorch fp32: max rel {fp32_rel:.3g}; tolerance max(atol {self.atol:g} + "
            f"rtol {self.rtol:g}·scale, {self.k:g}·PyTorch fp32 error)){top1}"
            f"{extra}{flips}{'; ' + note if note else ''}"
        )

    def _discrete(self, rows: list[ParityRow]) -> str:
        """The numbers of a bool or integer output: how many elements differ."""
        r = max(rows, key=lambda r: r.badness)
        return (
            f"{r.differ} of {r.elements} elements differ from {self.reference} (a share of {r.max_abs:.2g}; "
            f"PyTorch fp32: {r.torch_fp32_abs:.2g}; tolerance max({DISCRETE_FRACTION:g}, {self.k:g}·PyTorch "
            f"fp32's share): a bool or integer output, compared element by element)"
        )

    def _flips(self) -> str:
        """``, 'mask': 1 of 196608 elements differ`` for bool or integer outputs that are not
        the worst but differ somewhere (decisions taken within rounding of their threshold)."""
        worst: dict[str, ParityRow] = {}
        for r in self.rows:
            if r.discrete and r.differ and (r.output not in worst or r.differ > worst[r.output].differ):
                worst[r.output] = r
        return "".join(f", {o!r}: {r.differ} of {r.elements} elements differ" for o, r in worst.items())

    def _layers_note(self) -> str:
        """``33 DCD layers within 2e-6, 20 Conv layers within 1e-6`` (worst relative error per kind)."""
        parts = []
        for kind in KINDS:
            rows = [r for r in self.layers if r.kind == kind]
            if rows:
                n = len({r.path for r in rows})
                parts.append(f"{n} {kind} layer{'s' if n != 1 else ''} within {max(r.max_rel for r in rows):.2g}")
        return ", ".join(parts) + " of float64 on their own inputs"

    def layer_table(self) -> str:
        """One line per layer and runtime: graph order, errors relative to the layer's scale."""
        width = max([5] + [len(r.path) for r in self.layers])
        lines = [
            f"{'layer':{width}s} {'kind':22s} {'runtime':12s} {'max rel':>9s} {'bound':>9s} "
            f"{'torch fp32':>10s} {'ok':>3s}"
        ]
        for r in self.layers:
            lines.append(
                f"{r.path:{width}s} {r.label:22s} {_runtime(r):12s} {r.max_rel:9.2g} {r.bound_rel:9.2g} "
                f"{r.torch_fp32_rel:10.2g} {'yes' if r.passed else 'NO':>3s}" + (f"  {r.note}" if r.note else "")
            )
        return "\n".join(lines)

    def table(self) -> str:
        """One line per row; errors are against the reference, 'torch fp32' is PyTorch's own."""
        head = "ORT opt" if all(r.backend == "onnxruntime" for r in self.rows) else "runtime"
        several = len(set(r.output for r in self.rows)) > 1
        width = max([6] + [len(r.output) for r in self.rows]) if several else 0
        out_head = f" {'output':{width}s}" if several else ""
        lines = [
            f"{head:8s} {'batch':>5s} {'inputs':>6s}{out_head} {'max abs':>10s} {'max rel':>10s} "
            f"{'torch fp32':>10s} {'tolerance':>10s} {'top-1':>6s} {'ok':>4s}"
        ]
        for r in self.rows:
            out = f" {r.output:{width}s}" if several else ""
            top1 = f"{r.top1_agreement:6.0%}" if r.classifier else f"{'-':>6s}"
            lines.append(
                f"{r.optimization:8s} {r.batch_size:5d} {r.n_inputs:6d}{out} {r.max_abs:10.3g} "
                f"{r.max_rel:10.3g} {r.torch_fp32_abs:10.3g} {r.tolerance:10.3g} "
                f"{top1} {'yes' if r.passed else 'NO':>4s}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The JSON document of ``dcd-validate --json`` (schema :data:`SCHEMA`)."""
        from .._version import __version__

        d = {"schema": SCHEMA, "version": __version__, **asdict(self)}
        d["passed"] = bool(self)
        d["verdict"] = self.verdict
        d["decided_by"] = self.decided_by
        d["inconclusive"] = self.inconclusive
        first = self.first_failing_layer
        d["first_failing_layer"] = None if first is None else first.path
        d["other_weights_likely"] = self.other_weights_likely
        d["ill_conditioned"] = self.ill_conditioned
        d["torch_fp32_rel"] = self.torch_fp32_rel
        for row, r in zip(d["rows"], self.rows):
            row["torch_fp32_rel"] = r.torch_fp32_rel
        for row, r in zip(d["layers"], self.layers):
            row["bound_rel"] = r.bound_rel
        return d


def _runtime(r: LayerRow) -> str:
    return "openvino" if r.backend == "openvino" else f"ORT {r.optimization}"
