"""The ONNX Runtime runner keeps the runner contract on a hand-built file.

Oracle: NumPy computing the tiny graph (``_tiny.oracle``).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _tiny import oracle, sample, write_tiny
from onnx import TensorProto, helper

from dcd_deploy.errors import BackendLoadError, BackendRunError, DCDDeployError
from dcd_deploy.runtimes import load_runner, onnx_with_outputs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("ort") / "tiny.onnx")


@pytest.mark.parametrize("optimization", ["disabled", "all"])
def test_run_computes_the_file(tiny, optimization):
    x = sample()
    runner = load_runner("onnxruntime", tiny, optimization=optimization)
    got = runner.run({"x": x})
    assert list(got) == ["y"]
    np.testing.assert_allclose(got["y"], oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_bind_is_the_same_inference(tiny):
    x = sample()
    call = load_runner("onnxruntime", tiny).bind({"x": x})
    np.testing.assert_allclose(call()[0], oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_extra_outputs_follow_the_outputs(tiny):
    x = sample()
    runner = load_runner("onnxruntime", tiny, extra_outputs=("h",))
    got = runner.run({"x": x}, ["y", "h"])
    np.testing.assert_allclose(got["h"], oracle(x)[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["y"], oracle(x)[0], rtol=1e-6, atol=1e-6)
    assert list(runner.run({"x": x})) == ["y", "h"]


def test_the_copy_with_extra_outputs_is_the_file_with_them_appended(tiny):
    """From a read ``proto``, the copy is the file's bytes plus the outputs (no second
    serialisation); it must parse to what appending them to the whole model gives."""
    proto = onnx.load(str(tiny))
    got = onnx.load_from_string(onnx_with_outputs(tiny, proto, ("h", "y", "h")))
    want = onnx.load(str(tiny))
    want.graph.output.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, None))
    assert got == want
    assert [o.name for o in proto.graph.output] == ["y"]  # the caller's proto is unchanged
    x = sample()  # and ONNX Runtime runs the copy: the extra tensor is the layer's value
    runner = load_runner("onnxruntime", tiny, extra_outputs=("h",), proto=proto)
    np.testing.assert_allclose(runner.run({"x": x})["h"], oracle(x)[1], rtol=1e-6, atol=1e-6)


def test_the_copy_of_a_file_with_external_weights_carries_them(tiny, tmp_path):
    """Weights in a side file are not in the file's bytes: the copy is the whole model."""
    path = tmp_path / "ext.onnx"
    onnx.save(onnx.load(str(tiny)), str(path), save_as_external_data=True, size_threshold=0, location="ext.bin")
    proto = onnx.load(str(path), load_external_data=False)
    copy = onnx.load_from_string(onnx_with_outputs(path, proto, ("h",)))
    assert all(t.data_location != TensorProto.EXTERNAL for t in copy.graph.initializer)
    x = sample()
    runner = load_runner("onnxruntime", path, extra_outputs=("h",), proto=proto)
    got = runner.run({"x": x})
    np.testing.assert_allclose(got["h"], oracle(x)[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["y"], oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_threads_and_level_reach_the_session(tiny):
    runner = load_runner("onnxruntime", tiny, threads=3, optimization="disabled")
    options = runner.session.get_session_options()
    assert options.intra_op_num_threads == 3 and options.inter_op_num_threads == 3
    info = runner.describe()
    assert info.name == "onnxruntime" and info.version and "3 thread(s)" in info.legend
    assert "optimisations disabled" in info.legend
    x = sample()  # None: ONNX Runtime's own default count, same result
    np.testing.assert_allclose(
        load_runner("onnxruntime", tiny, threads=None).run({"x": x})["y"], oracle(x)[0], rtol=1e-6, atol=1e-6
    )


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 2000
    return text


def test_a_corrupt_file_is_a_load_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage, not a protobuf")
    with pytest.raises(BackendLoadError) as exc:
        load_runner("onnxruntime", bad)
    assert one_line(exc).startswith(f"ONNX Runtime cannot load {bad}: ")


def test_a_wrong_input_shape_is_a_run_error_and_silent(tmp_path, capfd):
    runner = load_runner("onnxruntime", write_tiny(tmp_path / "fixed.onnx", (1, 3, 4, 4)))
    with pytest.raises(BackendRunError) as exc:
        runner.run({"x": sample(1, side=5)})
    text = one_line(exc)
    assert text.startswith("ONNX Runtime failed running") and "[ONNXRuntimeError]" not in text
    assert "onnxruntime" not in capfd.readouterr().err  # its own log is not printed too
    with pytest.raises(BackendRunError, match="invalid dimensions"):
        runner.bind({"x": sample(1, side=5)})()


def test_a_missing_input_and_an_unknown_level(tiny):
    with pytest.raises(BackendRunError, match="no value for its input 'x'"):
        load_runner("onnxruntime", tiny).run({"z": sample()})
    with pytest.raises(BackendLoadError, match="optimization level 'fast'"):
        load_runner("onnxruntime", tiny, optimization="fast")
    with pytest.raises(DCDDeployError, match="unknown runtime 'tensorrt'"):
        load_runner("tensorrt", tiny)
