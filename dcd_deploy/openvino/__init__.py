"""OpenVINO extension for the fused DCD op (``dcd_deploy::DCDPointwise``)."""

from __future__ import annotations

__all__ = ["build_extension"]


def __getattr__(name: str):
    # lazy, so that ``python -m dcd_deploy.openvino._build`` does not import _build twice
    if name == "build_extension":
        from ._build import build_extension

        return build_extension
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
