"""Every model x backend runner of a run, prepared before any timing.

:class:`RunnerCache` makes each form of a model once (the deploy form shared by
``torch-deploy`` and ``torch-paper``; each export mode's ONNX file shared by ONNX
Runtime and OpenVINO), records the DCD layer forms of what runs, and builds one runner
per backend through :mod:`dcd_deploy.bench._runners`. What a backend runs and on which
runtime is the registry's (:data:`dcd_deploy.runtimes.BACKENDS`: its ``source``,
``runtime`` and ``options``); nothing here switches on a backend's name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._backends import backend as backend_spec
from ._runners import bound_runner

#: Export settings of the runtimes' files (``dcd-export``'s defaults).
ONNX_EXPORT = {"strategy": "auto", "mode": "standard", "batch": "dynamic", "check": False}


def count_forms(strategies: Mapping[str, str] | None) -> dict[str, int] | None:
    """``{form: layers}`` of a ``{layer: form}`` map (None when empty)."""
    if not strategies:
        return None
    out: dict[str, int] = {}
    for form in strategies.values():
        out[form] = out.get(form, 0) + 1
    return out


def forms_of(forms: Mapping[tuple[str, str], dict | None], backend: str, name: str) -> dict[str, int] | None:
    """The DCD layer forms of what ``backend`` ran for ``name`` (``forms`` is
    :attr:`RunnerCache.forms`); a static model's ``fused`` file is its standard one."""
    form = backend_spec(backend).source
    if form == "fused":
        return forms.get(("fused", name), forms.get(("onnx", name)))
    return forms.get((form, name))


class RunnerCache:
    """Every model x backend runner, prepared before timing; ONNX files in ``tmp``.

    Args:
        built: name -> the model (an ``nn.Module``, or the ``Path`` of an ONNX file
            timed as it is).
        x: the run's input tensor (:func:`~dcd_deploy.bench.harness.fixed_input`), or a
            tuple of them (a model of several inputs, in ``forward``'s order).
        tmp: the directory of the exported files.
        input_size: a side or ``(H, W)``.
        threads: the runtimes' thread count.
        progress: called with one line per form made.

    Attributes:
        runners: (backend, name) -> a no-argument call running the model once.
        forms: (form, name) -> DCD layer forms of that form of the model (:func:`forms_of`).
    """

    def __init__(
        self, built: Mapping[str, Any], *, x, tmp: str, input_size, threads: int, progress: Callable[[str], None]
    ):
        several = isinstance(x, tuple)
        self.built, self.x, self.tmp = built, x, tmp
        self.x_np = tuple(v.numpy().copy() for v in x) if several else x.numpy().copy()
        # the exporter's spelling: the side of a square input, else (H, W)
        square = isinstance(input_size, int) or input_size[0] != input_size[1]
        self.input_size = input_size if square else input_size[0]
        self.threads, self.progress = threads, progress
        if several:  # a model of several inputs is traced on one sample of each
            self.example = {"example_inputs": tuple(v[:1] for v in x)}
        else:  # a model of other than 3 input channels is traced on the timed input's shape
            c, hw = x.shape[1], tuple(x.shape[2:])
            self.example = {} if c == 3 else {"example_inputs": (x.new_zeros(1, c, *hw),)}
        self.runners: dict[tuple[str, str], Callable[[], Any]] = {}
        self.forms: dict[tuple[str, str], dict | None] = {}
        self._onnx: dict[tuple[str, str], Path] = {}
        self._deploy: dict[str, Any] = {}

    def exported(self, name: str, mode: str = ONNX_EXPORT["mode"]) -> Path:
        """``name`` exported as ``dcd-export --mode MODE`` would (once per mode); an ONNX
        file given to time is itself."""
        if isinstance(self.built[name], Path):
            return self.built[name]
        if (name, mode) not in self._onnx:
            from ..exporters import export_onnx

            t0 = time.perf_counter()
            suffix = "" if mode == ONNX_EXPORT["mode"] else f".{mode}"
            res = export_onnx(
                self.built[name],
                Path(self.tmp) / f"{name}{suffix}.onnx",
                input_size=self.input_size,
                **self.example,
                batch=None,
                check=False,
                strategy=ONNX_EXPORT["strategy"],
                mode=mode,
            )
            self._onnx[name, mode] = Path(res.path)
            self.forms[("onnx" if mode == ONNX_EXPORT["mode"] else mode, name)] = count_forms(
                getattr(res, "strategies", None)
            )
            self.progress(f"[export] {name}{' (' + mode + ')' if suffix else ''}: {time.perf_counter() - t0:.1f} s")
        return self._onnx[name, mode]

    def fused_or_standard(self, name: str) -> Path:
        """The ``fused`` form's file: ``mode="fused"`` for a model with DCD layers, else standard."""
        from ..layers.dcd import DCDConv2d

        if isinstance(self.built[name], Path):
            return self.built[name]
        has_dcd = any(isinstance(m, DCDConv2d) for m in self.built[name].modules())
        return self.exported(name, "fused" if has_dcd else ONNX_EXPORT["mode"])

    def deploy(self, name: str):
        """``name``'s deploy form (once; shared by torch-deploy and torch-paper)."""
        if name not in self._deploy:
            from ..exporters import to_deploy

            t0 = time.perf_counter()
            self._deploy[name] = to_deploy(
                self.built[name], strategy="auto", input_size=self.input_size, **self.example
            )
            self.forms[("deploy", name)] = count_forms(getattr(self._deploy[name], "strategies", None))
            self.progress(f"[deploy] {name}: deploy form in {time.perf_counter() - t0:.1f} s")
        return self._deploy[name]

    def source(self, form: str, name: str):
        """What a backend of ``form`` runs for ``name``: a module or an ONNX file."""
        if form == "model":
            return self.built[name]
        if form == "deploy":
            return self.deploy(name)
        return self.exported(name) if form == "onnx" else self.fused_or_standard(name)

    def add(self, backend: str, name: str) -> None:
        """Prepare ``name``'s runner on ``backend`` (its form made first if it is not yet)."""
        spec = backend_spec(backend)
        source = self.source(spec.source, name)
        run = bound_runner(spec, source, x=self.x, x_np=self.x_np, threads=self.threads)
        self.runners[(backend, name)] = run

    def forms_of(self, backend: str, name: str) -> dict[str, int] | None:
        """:func:`forms_of` this cache's forms."""
        return forms_of(self.forms, backend, name)


__all__ = ["ONNX_EXPORT", "RunnerCache", "count_forms", "forms_of"]
