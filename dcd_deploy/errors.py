"""User-facing errors.

Everything a user can cause (a bad path, an unknown architecture, a checkpoint that
does not fit, a parity failure) raises a :class:`DCDDeployError` subclass. The CLI
prints those as one ``Error: ...`` line and exits with status 1; any other exception
is a bug in the toolkit and keeps its traceback.
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (its type's name when it has none):
    what an ``Error:`` line quotes of an exception from a library or the user's code."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


class DCDDeployError(Exception):
    """Base class of every error a user can act on."""


class UnknownModelError(DCDDeployError, KeyError):
    """An architecture name that the registry does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelSpecError(DCDDeployError):
    """A ``MODULE:FUNCTION`` model that cannot be built: a missing file, module or
    function, or the user's code failing or returning something other than a module."""


class CheckpointError(DCDDeployError):
    """A checkpoint file that cannot be read, recognised or trusted."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint that needs full unpickling (it could run code when loaded)."""


class StateDictMismatchError(CheckpointError):
    """A state dict whose keys or shapes do not fit the architecture."""


class UnsupportedInputError(DCDDeployError):
    """An input the operation cannot take: an input size or batch the architecture cannot
    take, or a model without the DCD layers the operation needs."""


class ExportError(DCDDeployError):
    """A model or layer that the exporter cannot lower, or an output it cannot write."""


class ParityError(DCDDeployError):
    """ONNX Runtime and PyTorch disagree beyond tolerance."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class NonFiniteOutputError(ParityError):
    """The PyTorch model itself outputs NaN or Inf for finite inputs (a broken checkpoint)."""


class ExtensionError(DCDDeployError):
    """The OpenVINO extension cannot be built or loaded (no compiler, no openvino, a
    failed compile): the standard-op path still works."""


class BackendError(DCDDeployError):
    """A runtime (ONNX Runtime, OpenVINO, eager PyTorch) cannot load or run what it was
    given: a damaged file, an op it lacks (a fused file without the extension), an input
    of the wrong name, type or shape, a graph that fails at run time."""


class BackendLoadError(BackendError):
    """A runtime cannot load or compile a file (or the runner refuses an option)."""


class BackendRunError(BackendError):
    """A runtime fails running a loaded model on the inputs given."""
