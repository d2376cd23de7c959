"""ONNX Runtime's errors on a user's file as one line (:func:`onnxruntime_errors`).

(The runtimes layer translates them in the library; this is what ``dcd-validate`` uses
until then.)
"""

from __future__ import annotations

import contextlib
import re

from ..errors import DCDDeployError


@contextlib.contextmanager
def onnxruntime_errors(path):
    """ONNX Runtime failing on a user's file (a graph that fails at run time) is one line.

    ORT's own log of the failure (several coloured lines on stderr) is silenced: the
    ``Error:`` line carries its message.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # fatal only
    try:
        yield
    except Exception as exc:
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
        text = re.sub(r"/onnxruntime_src/\S+ \S+ ", "", text)  # source location and C++ signature
        if len(text) > _MAX_MESSAGE:
            text = text[:_MAX_MESSAGE - 3] + "..."
        raise DCDDeployError(f"ONNX Runtime failed running {path}: {text}") from None


#: Longest message passed on from a third-party library.
_MAX_MESSAGE = 300
