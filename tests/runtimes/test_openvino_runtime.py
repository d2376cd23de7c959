"""The OpenVINO runner keeps the runner contract on a hand-built file.

Oracle: NumPy computing the tiny graph (``_tiny.oracle``).
"""

from __future__ import annotations

import numpy as np
import pytest
from _tiny import oracle, sample, write_fused, write_tiny

from dcd_deploy.errors import BackendLoadError, BackendRunError
from dcd_deploy.runtimes import load_runner

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("ov") / "tiny.onnx")


def test_run_compiles_per_shape_and_computes_the_file(tiny):
    runner = load_runner("openvino", tiny)
    for n, side in ((1, 4), (2, 6)):
        x = sample(n, side)
        np.testing.assert_allclose(runner.run({"x": x})["y"], oracle(x)[0], rtol=1e-6, atol=1e-6)
    assert not runner.extension


def test_bind_with_fixed_shapes(tiny):
    x = sample(2)
    runner = load_runner("openvino", tiny, input_shapes=x.shape)
    result = runner.bind({0: x})()
    np.testing.assert_allclose(next(iter(result.values())), oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_bind_reads_the_feed_in_place_and_each_call_sees_it(tiny):
    """The timed call is the inference alone: no copy of the input into the request (the
    request's input tensor is the feed's memory); a change to the feed reaches the next
    call, as it would with a copy per call."""
    x = sample(2)
    runner = load_runner("openvino", tiny, input_shapes=x.shape)
    call = runner.bind({0: x})
    call()
    assert np.shares_memory(runner.request.get_input_tensor(0).data, x)
    x *= -2.0
    result = call()
    np.testing.assert_allclose(next(iter(result.values())), oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_extra_outputs_follow_the_outputs(tiny):
    x = sample()
    got = load_runner("openvino", tiny, extra_outputs=("h",)).run({"x": x}, ["y", "h"])
    np.testing.assert_allclose(got["h"], oracle(x)[1], rtol=1e-6, atol=1e-6)
    with pytest.raises(BackendRunError, match="does not expose 'nope'"):
        load_runner("openvino", tiny).run({"x": x}, ["nope"])


def test_threads_reach_the_compiled_model(tiny):
    runner = load_runner("openvino", tiny, threads=2, input_shapes=(1, 3, 4, 4))
    compiled = runner.compiled
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 2
    assert "float32" in str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    info = runner.describe()
    assert info.name == "openvino" and info.version and "2 thread(s)" in info.legend


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 2000
    return text


def test_a_corrupt_file_is_a_load_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage, not a protobuf")
    with pytest.raises(BackendLoadError) as exc:
        load_runner("openvino", bad)
    assert "is not an ONNX model" in one_line(exc)


def test_a_wrong_input_shape_is_a_run_error(tiny):
    runner = load_runner("openvino", tiny, input_shapes=(1, 3, 4, 4))
    with pytest.raises(BackendRunError) as exc:
        runner.run({"x": sample(1, side=5)})
    assert one_line(exc).startswith(f"OpenVINO failed running {tiny}: ")


def test_a_fused_file_without_the_extension_is_a_load_error(tmp_path):
    fused = write_fused(tmp_path / "fused.onnx")
    with pytest.raises(BackendLoadError) as exc:
        load_runner("openvino", fused, extension=False, input_shapes=(1, 4, 4, 3))
    text = one_line(exc)
    assert text.startswith(f"OpenVINO cannot compile {fused}: ") and "load the extension" in text
