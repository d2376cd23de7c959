"""OpenVINO's CPU plugin: the one place a model is compiled.

Every compiled model: ``threads`` inference threads, one stream, the latency hint, fp32
pinned (the CPU plugin's default is bf16 wherever the CPU has any bf16 support: logits
off by up to 30% of their range, and not an fp32 time). A file with ``dcd_deploy``
nodes (``dcd-export --mode fused``) needs this toolkit's extension
(:mod:`dcd_deploy.openvino`): ``extension=None`` loads it exactly then, ``True`` always,
``False`` never (such a file then fails to load, as in a plain OpenVINO). With the
extension, an inference in which a fused op failed raises (OpenVINO's CPU plugin
swallows such failures; :func:`dcd_deploy.openvino.checked`).

Without ``input_shapes`` the runner compiles once per set of input shapes it is fed.
OpenVINO is imported when a model is compiled, so importing this module needs none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .. import openvino as ovx
from ..errors import BackendLoadError, BackendRunError
from ._base import Feed, Runner


def compile_file(
    path,
    *,
    threads: int | None = 1,
    input_shape=None,
    perf_counters: bool = False,
    extra_outputs: Sequence[str] = (),
    extension: bool | None = None,
):
    """``path`` (ONNX or OpenVINO IR) compiled for CPU: the arguments of
    :func:`dcd_deploy.openvino.compile_onnx`, plus ``extension`` (None: when the file needs it).

    Raises:
        ExtensionError: openvino is missing or fails to import, or the extension is needed
            and cannot be built or loaded.
        BackendLoadError: OpenVINO cannot read or compile the file.
    """
    ov = ovx.import_openvino()
    core = ov.Core()
    fused = ovx.needs_extension(path) if extension is None else bool(extension)
    if fused:
        ovx.add_extension(core)
    try:
        model = core.read_model(str(path))
        if extra_outputs:
            model.add_outputs(list(extra_outputs))
        if input_shape is not None:
            model.reshape(
                {k: list(v) for k, v in input_shape.items()} if isinstance(input_shape, dict) else list(input_shape)
            )
        config = {
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32",
            "PERF_COUNT": bool(perf_counters),
        }
        if threads is not None:  # None: the plugin's default, a thread per core
            config = {"INFERENCE_NUM_THREADS": int(threads), **config}
        compiled = core.compile_model(model, "CPU", config)
    except RuntimeError as exc:  # OpenVINO's errors for files it cannot read or compile
        hint = "" if fused or "dcd_deploy" not in str(exc) else " (the file has dcd_deploy nodes: load the extension)"
        raise BackendLoadError(f"OpenVINO cannot compile {path}: {ovx.openvino_message(exc)}{hint}") from None
    return ovx.checked(compiled, path) if fused else compiled


class OpenVINORunner(Runner):
    """An ONNX file (or IR ``.xml``) compiled by OpenVINO for CPU.

    Args:
        source: the file's path.
        threads: ``INFERENCE_NUM_THREADS`` (None: the plugin's default).
        input_shapes: the shape (or ``{input name: shape}``) to compile for now; None:
            compile for each set of shapes fed.
        extra_outputs: tensors to return after the file's outputs.
        extension: load the fused-kernel extension (None: when the file has fused nodes).
        perf_counters: OpenVINO's per-node counters on (read from :attr:`request`).

    Attributes:
        compiled, request: OpenVINO's compiled model and infer request for the shapes last
            prepared (at construction with ``input_shapes``, else at the last call).
    """

    runtime, title = "openvino", "OpenVINO"

    def __init__(
        self,
        source,
        *,
        threads: int = 1,
        input_shapes=None,
        extra_outputs: Sequence[str] = (),
        extension: bool | None = None,
        perf_counters: bool = False,
    ):
        super().__init__(source, threads=threads, input_shapes=input_shapes, extra_outputs=extra_outputs)
        self.path = Path(source)
        self.extension = ovx.needs_extension(self.path) if extension is None else bool(extension)
        self.perf_counters = bool(perf_counters)
        self._compiled: dict = {}  # input shapes (None: as given) -> (request, {name: port})
        self.compiled = self.request = None  # the compiled model and request of the last shapes fed
        if input_shapes is not None:
            self._prepare(None)

    def _prepare(self, shapes):
        if shapes not in self._compiled:
            compiled = compile_file(
                self.path,
                threads=self.threads,
                perf_counters=self.perf_counters,
                input_shape=self.input_shapes if shapes is None else dict(shapes),
                extra_outputs=self.extra_outputs,
                extension=self.extension,
            )
            self._compiled[shapes] = (compiled, compiled.create_infer_request())
        self.compiled, self.request = self._compiled[shapes]
        return self._compiled[shapes]

    def _for(self, feed: Feed):
        key = None if self.input_shapes is not None else tuple((k, np.shape(v)) for k, v in feed.items())
        return self._prepare(key)

    def run(self, feed: Feed, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        compiled, request = self._for(feed)
        ports = {}
        for port in compiled.outputs:
            for name in port.get_names():
                ports.setdefault(name, port)
        if outputs is None:
            chosen = [(p.get_any_name(), p) for p in compiled.outputs]
        else:
            missing = [n for n in outputs if n not in ports]
            if missing:
                raise BackendRunError(f"OpenVINO does not expose {missing[0]!r} of {self.path}")
            chosen = [(n, ports[n]) for n in outputs]
        result = self._call(request, dict(feed))
        return {n: np.array(result[p]) for n, p in chosen}

    def bind(self, feed: Feed) -> Callable[[], object]:
        """As :meth:`Runner.bind`, in OpenVINO's shared-memory mode: the call reads the
        feed's arrays in place and leaves the outputs in the request's own tensors (the
        result is valid until the next call). Copying a 224x224 image in and the outputs
        out took 0.05-0.1 ms of every timed call, more in the fused models' runs than in
        the static ones' (AMD EPYC, 2026-11-27), none of it the inference's."""
        request, feed = self._for(feed)[1], dict(feed)
        return lambda: self._call(request, feed, shared=True)

    def _call(self, request, feed, *, shared: bool = False):
        try:
            if shared:
                return request.infer(feed, share_inputs=True, share_outputs=True)
            return request.infer(feed)
        except RuntimeError as exc:  # OpenVINO's run-time failures (a kernel refusing its input, a shape)
            raise BackendRunError(f"OpenVINO failed running {self.path}: {ovx.openvino_message(exc)}") from None

    def legend(self) -> str:
        fused = ", dcd-deploy's fused DCD kernels" if self.extension else ""
        return f"OpenVINO {self.version() or '?'}, CPU plugin, fp32, {self.threads} thread(s), one stream{fused}"


__all__ = ["OpenVINORunner", "compile_file"]
