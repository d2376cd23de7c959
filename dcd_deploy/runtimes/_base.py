"""The one contract every runtime's runner keeps.

A runner is made from a source (an ONNX file, or a PyTorch module for the eager
runtime) and options, all given at construction (:func:`~dcd_deploy.runtimes.load_runner`):

* ``threads``: the runtime's thread count (intra = inter = N for ONNX Runtime,
  ``INFERENCE_NUM_THREADS`` for OpenVINO; eager PyTorch's pool is process-wide, so there
  None leaves the caller's setting and a number is set around each call);
* ``input_shapes``: the shapes to prepare for, ``{input name: shape}`` or one shape for a
  one-input model (OpenVINO compiles for them; without, it compiles once per set of
  shapes it is fed);
* ``extra_outputs``: intermediate tensors to return after the model's outputs (the
  layer-wise parity check reads each layer's input and output this way);
* the runtime's own options (ONNX Runtime's ``optimization`` level, OpenVINO's
  ``extension`` for files with fused ``dcd_deploy`` nodes, PyTorch's ``onednn``).

Then ``run(feed)`` maps a dict of NumPy arrays (by input name) to a dict of NumPy arrays
(by output name), ``bind(feed)`` gives a no-argument callable that does the inference
and nothing else (what the benchmark times; it returns the runtime's own result), and
``describe()`` says what runs. Every failure a user can cause (a damaged file, an op the
runtime lacks, an input of the wrong shape) is a
:class:`~dcd_deploy.errors.BackendError` subclass with a one-line message, never the
runtime's own exception.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendLoadError

#: Longest text quoted from a runtime's own message in an error line.
MAX_MESSAGE = 300

#: ``{input name: array}``; OpenVINO and eager PyTorch also take ``{position: array}``.
Feed = Mapping[Any, np.ndarray]


@dataclass(frozen=True)
class RuntimeInfo:
    """What a runner runs on, for reports.

    Attributes:
        name: the runtime's key (``onnxruntime``, ``openvino``, ``torch``).
        title: its name in prose (``ONNX Runtime``).
        legend: one line with the settings that matter for a measurement.
        version: the installed release, None when it cannot be told.
    """

    name: str
    title: str
    legend: str
    version: str | None


class Runner(abc.ABC):
    """One model loaded in one runtime (see the module docstring for the contract)."""

    #: The runtime's key and title (:class:`RuntimeInfo`).
    runtime: str = ""
    title: str = ""

    def __init__(self, source, *, threads: int | None = 1, input_shapes=None, extra_outputs: Sequence[str] = ()):
        if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
            raise BackendLoadError(f"{self.title}: threads must be a positive integer, not {threads!r}")
        self.source = source
        self.threads = None if threads is None else int(threads)
        self.input_shapes = input_shapes
        self.extra_outputs = tuple(extra_outputs)

    @abc.abstractmethod
    def run(self, feed: Feed, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The model's outputs (then the extra outputs) for ``feed``, by name.

        Args:
            feed: ``{input name: array}``.
            outputs: the names to return, in this order; None: every output, then the
                extra outputs.

        Raises:
            BackendRunError: the runtime fails on this input (name, type, shape, or the
                graph failing at run time).
        """

    @abc.abstractmethod
    def bind(self, feed: Feed) -> Callable[[], Any]:
        """A no-argument call running ``feed`` (prepared once, here), returning the
        runtime's own result: the timed inference and nothing else."""

    @abc.abstractmethod
    def legend(self) -> str:
        """One line with the settings of this runner."""

    def version(self) -> str | None:
        """The runtime's installed release."""
        return package_version(self.runtime)

    def describe(self) -> RuntimeInfo:
        """Name, title, legend line and version of what runs."""
        return RuntimeInfo(self.runtime, self.title, self.legend(), self.version())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.legend()}>"


def package_version(name: str) -> str | None:
    """An installed distribution's version, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def clip(text: str, n: int = MAX_MESSAGE) -> str:
    """``text`` on one line, cut to ``n`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."
