"""The fused ops' inputs as the C++ side lays them out (``InputLayout`` in
``csrc/openvino/op_contract.hpp``, read through the extension's ``dcd_deploy_ov_inputs``)
against the exporter's description, for every attribute combination the exporter emits."""

from __future__ import annotations

import ctypes
import itertools

import pytest

pytest.importorskip("openvino")

from dcd_deploy.exporters import _fused, fused_inputs  # noqa: E402
from dcd_deploy.exporters._fused_contract import ACTIVATIONS  # noqa: E402
from dcd_deploy.openvino import build_extension  # noqa: E402


def python_inputs(op_type: str, attrs: dict) -> list[str]:
    """The node's inputs in order, as the exporter emits them (its one description)."""
    return fused_inputs(attrs, op_type)


def _emitted_attributes():
    """Every attribute combination the exporter emits, per op (activation, form, stride and
    offset and the depthwise geometry do not move inputs; one value of each stands for all)."""
    for op_type, se, attention, residual, pool, latent in itertools.product(
        _fused.OP_TYPES, (0, 1), (0, 1), (0, 1), (1, 2), (0, 1)
    ):
        attrs = dict(pool=pool, se=se, attention=attention, residual=residual, activation="relu")
        attrs.update(form="latent" if op_type == _fused.OP_TYPE else None)
        if op_type == _fused.EPILOGUE_OP_TYPE:
            attrs.update(dict(latent_input=1) if latent else dict(stride=2, offset=0))  # joint fusion / centre tap
        elif latent:
            continue  # latent_input is DCDConvEpilogue's
        if op_type == _fused.DEPTHWISE_OP_TYPE:
            attrs.update(kernel=3, stride=2, dilation=1, pads=[1, 1, 1, 1])
        yield op_type, {k: v for k, v in attrs.items() if v is not None}


@pytest.fixture(scope="module")
def cpp_inputs():
    lib = ctypes.CDLL(str(build_extension()))
    fn = lib.dcd_deploy_ov_inputs
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
    ]

    def names(op_type: str, attrs: dict, *, packed: bool = False) -> list[str] | None:
        buf = ctypes.create_string_buffer(512)
        flags = [attrs[k] for k in ("se", "attention", "residual")] + [attrs.get("latent_input", 0)]
        n = fn(op_type.encode(), *flags, int(packed), buf, len(buf))
        if n < 0:
            return None
        assert n < len(buf)
        return buf.value.decode().split(",")

    return names


@pytest.mark.parametrize(
    "op_type,attrs",
    list(_emitted_attributes()),
    ids=lambda v: (
        v
        if isinstance(v, str)
        else "-".join(f"{k}{v.get(k, 0)}" for k in ("se", "attention", "residual", "pool", "latent_input"))
    ),
)
def test_cpp_input_layout_is_the_exporters(cpp_inputs, op_type, attrs):
    assert cpp_inputs(op_type, attrs) == python_inputs(op_type, attrs)


def test_packed_form_keeps_the_activations_and_replaces_the_weights(cpp_inputs):
    # the ONNX conversion's form: the same activations in the same places, one weight input
    for op_type, attrs in _emitted_attributes():
        contract = python_inputs(op_type, attrs)
        acts = [n for n in contract if n in ACTIVATIONS]
        assert contract[: len(acts)] == acts
        assert cpp_inputs(op_type, attrs, packed=True) == acts + ["packed"]


def test_unknown_op_is_refused(cpp_inputs):
    assert cpp_inputs("DCDNoSuchOp", dict(se=0, attention=0, residual=0)) is None
