"""The one reader of an ONNX file's input (dcd-validate's image size, dcd-bench's files).

Oracle: the shapes, weights and metadata written into hand-built graphs.
"""

from __future__ import annotations

import onnx
import pytest
from _tiny import write_fused, write_tiny
from onnx import TensorProto, helper

from dcd_deploy._limits import read_onnx_image_size
from dcd_deploy.bench._models import onnx_input
from dcd_deploy.errors import UnsupportedInputError
from dcd_deploy.runtimes import read_onnx_input


def test_name_shape_weights_and_size(tmp_path):
    spec = read_onnx_input(write_tiny(tmp_path / "t.onnx", ("N", 3, 32, 48)))
    assert (spec.name, spec.shape, spec.fused, spec.params) == ("x", (None, 3, 32, 48), False, 6)
    assert spec.image_size() == (32, 48) and not spec.dynamic_size
    assert spec.resolve(batch=2, input_size=(1, 1)) == (2, 3, 32, 48)
    assert read_onnx_input(write_fused(tmp_path / "f.onnx")).fused
    # the callers that used to read it themselves now read it here
    assert onnx_input is read_onnx_input
    assert read_onnx_image_size(tmp_path / "t.onnx") == (32, 48)


def test_not_an_image_input(tmp_path):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 4, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 4, 4])
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["a", "b"], ["c"])],
            "g",
            [a, b],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
        )
    )
    onnx.save(model, str(tmp_path / "two.onnx"))
    with pytest.raises(UnsupportedInputError, match="has 2 inputs"):
        read_onnx_input(tmp_path / "two.onnx")
    four = read_onnx_input(write_tiny(tmp_path / "c4.onnx", ("N", 4, 8, 12)))  # RGB-D: any channel count 1-64
    assert (four.channels, four.image_size()) == (4, (8, 12))
    assert read_onnx_input(write_tiny(tmp_path / "cn.onnx", ("N", "C", 8, 8))).channels == 3  # symbolic: RGB
    many = read_onnx_input(write_tiny(tmp_path / "c65.onnx", ("N", 65, 8, 8)))
    with pytest.raises(UnsupportedInputError, match=r"takes \(N, C, H, W\) with C 1-64"):
        many.image_size()
