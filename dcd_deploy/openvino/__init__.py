"""OpenVINO with dcd-deploy's fused DCD kernels.

The extension library (C++ in ``csrc/openvino``) runs the ``dcd_deploy.DCDPointwise``
nodes of a ``dcd-export --mode fused`` file in OpenVINO's CPU plugin. It is compiled on
this machine against the installed ``openvino`` wheel the first time it is asked for
(``make install`` does it up front)::

    import openvino as ov
    import dcd_deploy

    core = ov.Core()
    core.add_extension(str(dcd_deploy.openvino_extension()))
    # then read and compile "model.onnx" for "CPU" as usual

:func:`compile_onnx` does that with this toolkit's measurement settings (N threads, one
stream, fp32 pinned; it is :mod:`dcd_deploy.runtimes`' OpenVINO runtime, which every
part of the toolkit runs OpenVINO through). OpenVINO is imported lazily: importing this
module needs neither OpenVINO nor a compiler.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path

from ..errors import BackendLoadError, BackendRunError, ExtensionError, first_line

#: Phases of the op's own timers (``DCD_DEPLOY_PROFILE=1``), in the library's order.
PROFILE_PHASES = ("pool", "branch", "form", "gemm", "total")
#: Longest text of OpenVINO's (or a file's) quoted in an error line.
MAX_MESSAGE = 300


def openvino_extension() -> Path:
    """Path of the extension library for the installed OpenVINO, compiled if missing.

    The first call on a machine (or after a source or OpenVINO change) compiles it, a
    about ten seconds; later calls return the existing file.

    Raises:
        ExtensionError: openvino is not installed, no C++ compiler, or the build failed
            (one line naming what to install or the compiler's first error).
    """
    from ._build import build_extension  # lazy: `python -m dcd_deploy.openvino._build` runs it as main

    return build_extension()


def needs_extension(onnx_path, proto=None) -> bool:
    """Whether an ONNX file (or an OpenVINO IR ``.xml``) has ``dcd_deploy`` nodes, which
    only the extension runs.

    Args:
        proto: the ONNX file's ``ModelProto`` when the caller has read it already.

    Raises:
        BackendLoadError: the file has ``dcd_deploy`` nodes the extension has no kernel for
            (a ``--mode function`` export), or is neither ONNX nor IR.
    """
    import onnx

    if str(onnx_path).lower().endswith(".xml"):  # OpenVINO IR: the op's opset is named in the XML
        try:
            with open(onnx_path, "rb") as fh:
                return b'version="dcd_deploy"' in fh.read()
        except OSError as exc:
            raise BackendLoadError(f"cannot read {onnx_path}: {exc.strerror or exc}") from None
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False) if proto is None else proto
    except Exception as exc:  # protobuf's DecodeError and friends
        raise BackendLoadError(f"{onnx_path} is not an ONNX model: {_clip(first_line(exc))}") from None
    ops = {n.op_type for n in proto.graph.node if n.domain == "dcd_deploy"}
    from ..exporters import FUSED_OP_TYPES  # lazy: the exporters import torch

    other = sorted(ops - set(FUSED_OP_TYPES))  # the fused ops the extension runs
    if other:
        raise BackendLoadError(
            f"{onnx_path} has dcd_deploy.{_clip(other[0], 60)} nodes (a --mode function export), "
            "which OpenVINO cannot run; export with --mode fused or --mode standard for OpenVINO"
        )
    return bool(ops)


def import_openvino():
    """``import openvino``, or one line saying why it cannot be used.

    Raises:
        ExtensionError: openvino is not installed, or is installed but fails to import
            (a broken or mismatched install: a missing shared library, an ABI error).
    """
    if importlib.util.find_spec("openvino") is None:
        raise ExtensionError("openvino is not installed: pip install 'dcd-deploy[openvino]'")
    try:
        import openvino as ov
    except Exception as exc:  # ImportError, OSError from a missing .so, and the like
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ExtensionError(
            f"openvino is installed but fails to import ({type(exc).__name__}: {_clip(text)}); "
            "reinstall it: pip install --force-reinstall 'dcd-deploy[openvino]'"
        ) from None
    return ov


def compile_onnx(onnx_path, *, threads: int = 1, input_shape=None, perf_counters: bool = False, extra_outputs=()):
    """``onnx_path`` compiled by OpenVINO for CPU, with the extension when the file needs it.

    Settings: ``threads`` threads, one stream, latency hint, fp32. OpenVINO's CPU plugin
    defaults to bf16 where the CPU has any bf16 support (logits off by up to 30% of
    their range, and not an fp32 time); every backend here computes in fp32.

    Args:
        onnx_path: an exported file.
        threads: OpenVINO's ``INFERENCE_NUM_THREADS``.
        input_shape: a static input shape to compile for (e.g. ``(1, 3, 224, 224)``), or
            ``{input name: shape}`` for a file with several inputs; None keeps the file's.
        perf_counters: OpenVINO's per-layer performance counters on (``PERF_COUNT``).
        extra_outputs: names of intermediate tensors to expose as outputs too (the
            layer-wise parity check reads each layer's input and output).

    Returns:
        OpenVINO's ``CompiledModel``; for a file with ``dcd_deploy`` nodes, a thin wrapper
        of it whose ``create_infer_request().infer(...)`` and ``__call__`` raise
        :class:`~dcd_deploy.errors.BackendRunError` when a fused op failed during that inference (OpenVINO's
        CPU plugin swallows such failures; see :func:`last_kernel_error`). Every other
        attribute is the ``CompiledModel``'s (or the ``InferRequest``'s).

    Raises:
        ExtensionError: openvino is missing or fails to import, or the file needs the
            extension and it cannot be built or loaded.
        BackendLoadError: OpenVINO cannot read or compile the file (ONNX or IR ``.xml``).
    """
    from ..runtimes import compile_openvino  # the runtime layer compiles; lazy: it imports this module

    return compile_openvino(
        onnx_path, threads=threads, input_shape=input_shape, perf_counters=perf_counters, extra_outputs=extra_outputs
    )


def add_extension(core) -> None:
    """Load the extension into an OpenVINO ``Core``; its kernels' failures are then
    recorded for :func:`checked` instead of printed.

    Raises:
        ExtensionError: the extension cannot be built, or OpenVINO cannot load it.
    """
    path = openvino_extension()
    try:
        core.add_extension(str(path))
    except RuntimeError as exc:
        raise ExtensionError(f"OpenVINO cannot load the extension {path}: {openvino_message(exc)}") from None
    _library().dcd_deploy_ov_set_quiet(1)  # its failures are raised by _CheckedRequest instead


def checked(compiled, path):
    """``compiled`` (a ``CompiledModel`` of a file run with the extension) wrapped so that
    its requests' ``infer`` and its ``__call__`` raise :class:`BackendRunError` when a fused
    op failed during that inference; every other attribute is OpenVINO's."""
    return _CheckedModel(compiled, _library(), path)


class _CheckedModel:
    """A compiled model whose infer requests raise when a fused op failed.

    OpenVINO's CPU plugin swallows whatever an extension's ``evaluate`` reports (an
    exception or ``false``), so the op catches its own failures, fills its output with
    NaN and records the reason in the library (``dcd_deploy_ov_error_count``,
    ``dcd_deploy_ov_last_error``); the request compares the count around each inference.
    Everything else is the OpenVINO object's.
    """

    def __init__(self, compiled, lib: ctypes.CDLL, path):
        self._compiled, self._lib, self._path = compiled, lib, path

    def create_infer_request(self):
        return _CheckedRequest(self._compiled.create_infer_request(), self._lib, self._path)

    def __call__(self, *args, **kwargs):
        return _checked(self._compiled, self._lib, self._path, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._compiled, name)


class _CheckedRequest:
    def __init__(self, request, lib: ctypes.CDLL, path):
        self._request, self._lib, self._path = request, lib, path

    def infer(self, *args, **kwargs):
        return _checked(self._request.infer, self._lib, self._path, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._request, name)


def _checked(run, lib: ctypes.CDLL, path, *args, **kwargs):
    before = lib.dcd_deploy_ov_error_count()
    result = run(*args, **kwargs)
    if lib.dcd_deploy_ov_error_count() != before:
        raise BackendRunError(
            f"OpenVINO's fused DCD op failed running {path} (its output is not a result): {_clip(last_kernel_error())}"
        )
    return result


def last_kernel_error() -> str:
    """The message of the fused op's last failure in this process ("" if none)."""
    lib = _library()
    buf = ctypes.create_string_buffer(1024)
    lib.dcd_deploy_ov_last_error(buf, len(buf))
    return buf.value.decode(errors="replace")


def _clip(text: str, n: int = MAX_MESSAGE) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def openvino_message(exc: BaseException) -> str:
    """The informative line of an OpenVINO exception, with the ONNX node it names.

    OpenVINO's messages stack a line per layer it passed through ("Exception from
    core.cpp", "While validating node ...") before the reason, then a summary.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if "Summary:" in lines:
        lines = lines[: lines.index("Summary:")]
    if not lines:
        return type(exc).__name__
    node = re.search(r"While validating ONNX node '<Node\([^)]*\): ([^>]*)>'", str(exc))
    reason = _clip(lines[-1])
    return f"{reason} (node {_clip(node.group(1), 100)})" if node else reason


def kernel_isa() -> str:
    """The instruction set the fused kernels use now (``avx512``, ``avx2`` or ``portable``;
    ``DCD_DEPLOY_ISA`` forces one)."""
    lib = _library()
    lib.dcd_deploy_ov_isa.restype = ctypes.c_char_p
    return lib.dcd_deploy_ov_isa().decode()


def kernel_profile(*, reset: bool = False) -> dict[str, float]:
    """Seconds the fused ops spent per phase since the last reset (``DCD_DEPLOY_PROFILE=1``
    must be set while they run), plus ``calls``.

    Args:
        reset: zero the counters after reading them.
    """
    lib = _library()
    buf = (ctypes.c_double * (len(PROFILE_PHASES) + 1))()
    n = lib.dcd_deploy_ov_profile(buf, len(buf))
    out = dict(zip(PROFILE_PHASES + ("calls",), list(buf)[:n]))
    if reset:
        lib.dcd_deploy_ov_profile_reset()
    return out


def _library() -> ctypes.CDLL:
    # dlopen of the path OpenVINO loaded returns the same handle: counters are shared
    lib = ctypes.CDLL(str(openvino_extension()))
    lib.dcd_deploy_ov_error_count.restype = ctypes.c_ulonglong
    lib.dcd_deploy_ov_last_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.dcd_deploy_ov_set_quiet.argtypes = [ctypes.c_int]
    return lib


def build_extension(**kwargs) -> Path:
    """:func:`dcd_deploy.openvino._build.build_extension` (``out_dir``, ``force``, ``progress``)."""
    from ._build import build_extension as build

    return build(**kwargs)


__all__ = [
    "PROFILE_PHASES",
    "add_extension",
    "build_extension",
    "checked",
    "compile_onnx",
    "import_openvino",
    "kernel_isa",
    "kernel_profile",
    "last_kernel_error",
    "needs_extension",
    "openvino_extension",
    "openvino_message",
]
