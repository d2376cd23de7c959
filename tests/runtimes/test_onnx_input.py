"""The one reader of an ONNX file's input (dcd-validate's image size, dcd-bench's files).

Oracle: the shapes, weights and metadata written into hand-built graphs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _tiny import write_fused, write_tiny
from onnx import TensorProto, helper, numpy_helper

from dcd_deploy._limits import read_onnx_image_size
from dcd_deploy.bench._models import image_file_input
from dcd_deploy.errors import DCDDeployError, UnsupportedInputError
from dcd_deploy.runtimes import GraphInput, read_onnx_file, read_onnx_input


def test_name_shape_weights_and_size(tmp_path):
    spec = read_onnx_input(write_tiny(tmp_path / "t.onnx", ("N", 3, 32, 48)))
    assert (spec.name, spec.shape, spec.fused, spec.params) == ("x", (None, 3, 32, 48), False, 6)
    assert spec.image_size() == (32, 48) and not spec.dynamic_size
    assert spec.resolve(batch=2, input_size=(1, 1)) == (2, 3, 32, 48)
    assert read_onnx_input(write_fused(tmp_path / "f.onnx")).fused
    # the callers that used to read it themselves now read it here
    assert image_file_input(tmp_path / "t.onnx") == spec
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
    # the bench names them and what feeds them
    with pytest.raises(DCDDeployError, match=r"takes 2 inputs \(a, b\); time it on yours with --inputs FILE"):
        image_file_input(tmp_path / "two.onnx")
    four = read_onnx_input(write_tiny(tmp_path / "c4.onnx", ("N", 4, 8, 12)))  # RGB-D: any channel count 1-64
    assert (four.channels, four.image_size()) == (4, (8, 12))
    assert read_onnx_input(write_tiny(tmp_path / "cn.onnx", ("N", "C", 8, 8))).channels == 3  # symbolic: RGB
    many = read_onnx_input(write_tiny(tmp_path / "c65.onnx", ("N", 65, 8, 8)))
    with pytest.raises(UnsupportedInputError, match=r"takes \(N, C, H, W\) with C 1-64"):
        many.image_size()


def test_every_input_of_a_file_of_several(tmp_path):
    """What the bench checks ``--inputs`` against: each input's name, numpy type and axes,
    weights left out, in the graph's order."""
    w = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), "w")
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 7]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 4]),  # an initializer listed as input (IR < 4)
        helper.make_tensor_value_info("mask", TensorProto.BOOL, None),
        helper.make_tensor_value_info("img", TensorProto.DOUBLE, [2, 3, 8, 8]),
        helper.make_tensor_value_info("half", TensorProto.BFLOAT16, [1]),
    ]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["ids"], ["y"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        initializer=[w],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    file = read_onnx_file(tmp_path / "m.onnx")
    assert file.inputs == (
        GraphInput("ids", "int64", (None, 7)),
        GraphInput("mask", "bool", None),
        GraphInput("img", "float64", (2, 3, 8, 8)),
        GraphInput("half", "bfloat16", (1,)),
    )
    assert (file.params, file.fused) == (4, False)


def test_a_file_is_parsed_once_until_it_changes(tmp_path, monkeypatch):
    import dcd_deploy._limits as limits

    path = write_tiny(tmp_path / "t.onnx", ("N", 3, 32, 48))
    loads = []
    real = limits.load_onnx_checked
    monkeypatch.setattr(limits, "load_onnx_checked", lambda p: loads.append(p) or real(p))
    first = read_onnx_file(path)
    assert read_onnx_file(path) is first and read_onnx_input(path).shape == (None, 3, 32, 48)
    assert len(loads) == 1
    write_tiny(tmp_path / "new.onnx", ("N", 3, 16, 16)).replace(path)  # rewritten: another file
    assert read_onnx_input(path).shape == (None, 3, 16, 16) and len(loads) == 2
    with pytest.raises(DCDDeployError, match="cannot read"):  # gone: the reader's own words, not the cache
        (tmp_path / "t.onnx").unlink() or read_onnx_file(path)
