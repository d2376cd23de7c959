"""dcd-deploy: take Dynamic Convolution Decomposition networks to the edge.

Public API: build (:func:`create_model`, :func:`list_models`), bring in a network of
one's own (:func:`convert`; :func:`to_static` for its static counterpart), load and
save (:func:`load_checkpoint`, :func:`save_checkpoint`), lower and export
(:func:`to_deploy`, :func:`export_onnx`), prove (:func:`check_parity`) and run fused
kernels in OpenVINO (:func:`openvino_extension`). Every name but
:data:`__version__` and :class:`DCDDeployError` is imported on first use, so ``import
dcd_deploy`` (and a command that stops at a usage error) does not load torch; export
and parity import ONNX Runtime lazily; OpenVINO is optional.
"""

from __future__ import annotations

from ._version import __version__
from .errors import DCDDeployError

__all__ = [
    "DCDDeployError",
    "__version__",
    "check_parity",
    "convert",
    "create_model",
    "export_onnx",
    "list_models",
    "load_checkpoint",
    "openvino_extension",
    "pseudo_train",
    "save_checkpoint",
    "to_deploy",
    "to_static",
]


def __getattr__(name: str):
    # Lazy: `import dcd_deploy` loads neither torch nor ONNX, and `import dcd_deploy.models`
    # needs only torch.
    if name in ("create_model", "list_models", "pseudo_train"):
        from . import models

        return getattr(models, name)
    if name in ("load_checkpoint", "save_checkpoint"):
        from . import checkpoint

        return getattr(checkpoint, name)
    if name == "to_deploy":
        from .exporters import to_deploy

        return to_deploy
    if name == "export_onnx":
        from .exporters import export_onnx

        return export_onnx
    if name == "check_parity":
        from .parity import check_parity

        return check_parity
    if name in ("convert", "to_static"):
        from . import conversion

        return getattr(conversion, name)
    if name == "openvino_extension":
        from .openvino import openvino_extension

        return openvino_extension
    raise AttributeError(f"module 'dcd_deploy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
