"""Lowering to deploy form and ONNX export."""

from ._deploy_dcd import DeployDCD
from ._fused import OP_TYPES as FUSED_OP_TYPES
from ._fused_contract import fused_inputs
from ._kinds import DCDKind, deploy_kind
from .lowering import to_deploy

__all__ = [
    "DeployDCD",
    "DCDKind",
    "FUSED_OP_TYPES",
    "deploy_kind",
    "fused_inputs",
    "to_deploy",
    "export_onnx",
    "ExportResult",
]


def __getattr__(name: str):
    # ONNX and ONNX Runtime load only when exporting.
    if name in ("export_onnx", "ExportResult"):
        from . import onnx as _onnx

        return getattr(_onnx, name)
    raise AttributeError(name)
