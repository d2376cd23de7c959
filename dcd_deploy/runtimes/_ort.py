"""ONNX Runtime: the one place an ``InferenceSession`` is made.

Every session: the CPU execution provider, ``threads`` intra- and inter-op threads,
sequential execution, the graph optimisation level asked for (``all`` by default;
parity also runs ``disabled``: ONNX Runtime's rewrites and layout changes are part of
what ships), and ONNX Runtime's own log silenced below fatal (its error is in the
exception, which becomes one line here). ``extra_outputs`` runs an in-memory copy of
the model with those tensors appended to the graph's outputs. ``profile_dir`` turns on
ONNX Runtime's profiler (``dcd-bench --profile``), read by :meth:`end_profiling`.

ONNX Runtime is imported when a runner is made, so importing this module needs none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import BackendLoadError, BackendRunError
from ._base import Feed, Runner, clip

#: ONNX Runtime graph optimisation levels (name -> ``GraphOptimizationLevel`` member).
LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
#: ONNX Runtime's log severity of our sessions: fatal only (its errors come as exceptions).
LOG_SEVERITY = 4


def session_options(*, threads: int | None, optimization: str = "all", profile_prefix: str | None = None):
    """The ``SessionOptions`` of every session: N threads (None: ONNX Runtime's default),
    sequential, the level asked for."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = so.inter_op_num_threads = threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[optimization])
    so.log_severity_level = LOG_SEVERITY
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def ort_message(exc: BaseException) -> str:
    """ONNX Runtime's message on one line, without its status prefix and source location."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+ \S+ ", "", text)  # source location and C++ signature
    return clip(text)


def is_ort_error(exc: BaseException) -> bool:
    """An exception ONNX Runtime raised for what it was given (its own exception types)."""
    return type(exc).__module__.startswith("onnxruntime")


class OnnxRuntimeRunner(Runner):
    """An ONNX file in an ONNX Runtime CPU session.

    Args:
        source: the file's path.
        threads: intra- and inter-op threads (None: ONNX Runtime's default, a thread per core).
        optimization: a key of :data:`LEVELS`.
        input_shapes: taken for the contract; a session runs any shape the file allows.
        extra_outputs: tensors to return after the file's outputs.
        profile_dir: a directory for ONNX Runtime's profile (profiling on).
        proto: the file's ``ModelProto`` when already read (saves a read with ``extra_outputs``).
        serialized: the file with ``extra_outputs`` appended, as :func:`with_outputs` returns
            it, when already made (sessions of several configurations share one copy).
    """

    runtime, title = "onnxruntime", "ONNX Runtime"

    def __init__(
        self,
        source,
        *,
        threads: int = 1,
        optimization: str = "all",
        input_shapes=None,
        extra_outputs: Sequence[str] = (),
        profile_dir=None,
        proto=None,
        serialized: bytes | None = None,
    ):
        super().__init__(source, threads=threads, input_shapes=input_shapes, extra_outputs=extra_outputs)
        if optimization not in LEVELS:
            raise BackendLoadError(
                f"unknown ONNX Runtime optimization level {optimization!r}; expected one of {', '.join(LEVELS)}"
            )
        self.optimization = optimization
        self.path = Path(source)
        prefix = None if profile_dir is None else str(Path(profile_dir) / (self.path.stem + "_profile"))
        self.session = self._load(proto, serialized, prefix)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def _load(self, proto, serialized, prefix):
        import onnxruntime as ort

        model = str(self.path)
        if self.extra_outputs:
            model = serialized if serialized is not None else with_outputs(self.path, proto, self.extra_outputs)
        try:
            return ort.InferenceSession(
                model,
                session_options(threads=self.threads, optimization=self.optimization, profile_prefix=prefix),
                providers=["CPUExecutionProvider"],
            )
        except Exception as exc:  # ORT raises its own exception types for unreadable files
            raise BackendLoadError(f"ONNX Runtime cannot load {self.path}: {ort_message(exc)}") from None

    def run(self, feed: Feed, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = self.output_names if outputs is None else list(outputs)  # the copy's outputs hold the extra ones
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise BackendRunError(f"ONNX Runtime failed running {self.path}: no value for its input {missing[0]!r}")
        return dict(zip(names, self._call(names, dict(feed))))

    def bind(self, feed: Feed, outputs: Sequence[str] | None = None) -> Callable[[], list]:
        """As :meth:`Runner.bind`; ``outputs`` limits what is computed (ONNX Runtime runs only
        the nodes they need)."""
        names, feed = self.output_names if outputs is None else list(outputs), dict(feed)
        return lambda: self._call(names, feed)

    def _call(self, names, feed) -> list:
        try:
            return self.session.run(names, feed)
        except Exception as exc:
            if not is_ort_error(exc):
                raise
            raise BackendRunError(f"ONNX Runtime failed running {self.path}: {ort_message(exc)}") from None

    def end_profiling(self) -> Path:
        """The profile's path (``profile_dir`` given); profiling stops."""
        return Path(self.session.end_profiling())

    def legend(self) -> str:
        return (
            f"ONNX Runtime {self.version() or '?'}, CPU, {self.threads} thread(s), sequential, "
            f"graph optimisations {self.optimization}"
        )


def with_outputs(onnx_path: Path, proto, extra: Sequence[str]) -> bytes:
    """The model with ``extra`` tensors appended to its graph outputs, serialised (``proto``
    is left as it was; read from ``onnx_path`` when None).

    With ``proto`` given and its weights inside the file, the copy is the file's own bytes
    followed by a ``ModelProto`` that holds only the extra graph outputs: protobuf parses
    concatenated messages as one, merging the embedded ``graph`` and appending to its
    repeated ``output`` (the encoding's rule for a field seen twice), so nothing is
    serialised again (2 s for a 740 MB file).
    """
    import onnx
    from onnx import TensorProto, helper

    whole = proto is None or any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)
    if whole:
        try:
            proto = onnx.load(str(onnx_path))  # the weights too: the copy is run from memory
        except Exception as exc:  # protobuf's DecodeError and friends
            raise BackendLoadError(f"ONNX Runtime cannot load {onnx_path}: {clip(exc)}") from None
    have = {o.name for o in proto.graph.output}
    added = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in dict.fromkeys(extra) if n not in have]
    if whole:
        proto.graph.output.extend(added)
        return proto.SerializeToString()
    tail = onnx.ModelProto()
    tail.graph.output.extend(added)
    try:
        data = Path(onnx_path).read_bytes()
    except OSError as exc:
        raise BackendLoadError(f"ONNX Runtime cannot load {onnx_path}: {clip(exc)}") from None
    return data + tail.SerializeToString()
