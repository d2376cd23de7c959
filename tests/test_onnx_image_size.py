"""The input size read from an ONNX file (dcd-validate's): square or H x W, from metadata or shape.

Oracle: the shapes and metadata written into hand-built ONNX graphs.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from dcd_deploy._limits import read_onnx_image_size, read_onnx_input_size
from dcd_deploy.errors import UnsupportedInputError


def write(path, shape, metadata=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    if metadata is not None:
        helper.set_model_props(model, {"input_size": metadata})
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    "shape, metadata, size",
    [
        (["N", 3, 32, 48], None, (32, 48)),
        (["N", 3, 32, 48], "32x48", (32, 48)),
        (["N", 3, "H", "W"], "[256, 320]", (256, 320)),
        (["N", 3, "H", "W"], "(256, 320)", (256, 320)),
        (["N", 3, 64, 64], "64", (64, 64)),
        (["N", 3, "H", "W"], None, (224, 224)),
    ],
)
def test_size_from_shape_or_metadata(tmp_path, shape, metadata, size):
    assert read_onnx_image_size(write(tmp_path / "m.onnx", shape, metadata)) == size


def test_square_only_reader_keeps_refusing_non_square(tmp_path):
    assert read_onnx_input_size(write(tmp_path / "s.onnx", ["N", 3, 40, 40])) == 40
    with pytest.raises(UnsupportedInputError, match="its input is 32x48; only square"):
        read_onnx_input_size(write(tmp_path / "r.onnx", ["N", 3, 32, 48]))


@pytest.mark.parametrize(
    "shape, metadata, message",
    [
        (["N", 3, 32, 48], "48x32", "disagrees with its input shape"),
        (["N", 3, 32, 48], "²", "is not an integer or HxW"),
        (["N", 3, 2000, 48], None, "outside 1-1024"),
        (["N", 3, "H", "W"], "64x5000", "outside 1-1024"),
    ],
)
def test_bad_sizes(tmp_path, shape, metadata, message):
    with pytest.raises(UnsupportedInputError, match=message):
        read_onnx_image_size(write(tmp_path / "b.onnx", shape, metadata))
