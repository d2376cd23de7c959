"""Backend runners: each runs the exported file in fp32 and returns what the file computes.

Oracle: ONNX Runtime on the same file (itself parity-checked against PyTorch elsewhere).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np
import onnxruntime as ort
import pytest

import dcd_deploy.openvino
from dcd_deploy import create_model, export_onnx, pseudo_train
from dcd_deploy.bench._runners import openvino_runner, ort_runner
from dcd_deploy.models import synthetic_images

SIZE = 64


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("runners") / "m.onnx"
    export_onnx(
        pseudo_train(create_model("mobilenetv2_035_dcd"), seed=2, input_size=SIZE), path, input_size=SIZE, check=False
    )
    x = synthetic_images(1, SIZE, seed=4).numpy()
    so = ort.SessionOptions()  # ORT as it comes, on the runner's one thread
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return path, x, sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_ort_runner_returns_the_file_output(exported):
    path, x, ref = exported
    np.testing.assert_array_equal(ort_runner(path, x, 1)()[0], ref)


def test_openvino_runner_pins_fp32_and_one_stream(monkeypatch, tmp_path):
    """OpenVINO's CPU default is bf16 where the CPU has it; the runner must ask for f32."""
    seen = {}

    class Compiled:
        def create_infer_request(self):
            return types.SimpleNamespace(infer=lambda feeds, **shared: seen.setdefault("feeds", feeds))

    class Core:
        def read_model(self, path):
            seen["path"] = path
            return types.SimpleNamespace(reshape=lambda shape: seen.setdefault("shape", shape))

        def compile_model(self, model, device, config):
            seen["device"], seen["config"] = device, config
            return Compiled()

    fake = types.SimpleNamespace(Core=Core, __spec__=importlib.machinery.ModuleSpec("openvino", None))
    monkeypatch.setitem(sys.modules, "openvino", fake)
    monkeypatch.setattr(dcd_deploy.openvino, "needs_extension", lambda path: False)  # a standard file
    x = np.zeros((2, 3, 8, 8), np.float32)
    run = openvino_runner(tmp_path / "m.onnx", x, 3)
    run()
    assert seen["device"] == "CPU" and seen["shape"] == [2, 3, 8, 8]
    assert seen["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert seen["config"]["INFERENCE_NUM_THREADS"] == 3 and seen["config"]["NUM_STREAMS"] == 1
    assert seen["feeds"][0] is x


def test_openvino_runner_matches_onnxruntime(exported):
    """With OpenVINO installed (`pip install 'dcd-deploy[openvino]'`): the same logits."""
    pytest.importorskip("openvino")
    path, x, ref = exported
    out = np.asarray(next(iter(openvino_runner(path, x, 1)().values())))  # OpenVINO's result dict
    np.testing.assert_allclose(out, ref, atol=1e-5 + 1e-3 * np.abs(ref).max(), rtol=0)
