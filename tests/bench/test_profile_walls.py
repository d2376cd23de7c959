"""The profiles' "run, profiled" time is the wall time of the call the timed runs time.

The runtimes' own run timers (ONNX Runtime's ``model_run`` event, OpenVINO's
``InferRequest.latency``) leave out the Python binding's copies of the input and outputs
(about 0.4 ms per call for a 224x224 MobileNetV2 in OpenVINO), so a report setting them
beside the timed runs' p50 compared two different things. A fake clock that advances a
fixed 7 ms across every call makes the expected value independent of how fast anything
runs: the profile must report exactly that.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from dcd_deploy import export_onnx

STEP_MS = 7.0


def _fake_clock():
    """Successive readings (ns) k s, k s + 7 ms, k + 1 s, k + 1 s + 7 ms, ...: every
    start/end pair of a profiled run is 7 ms apart."""
    reads = itertools.count()

    def clock():
        n = next(reads)
        return (n // 2) * 10**9 + (n % 2) * int(STEP_MS * 10**6)

    return clock


@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    path = tmp_path_factory.mktemp("walls") / "small.onnx"
    export_onnx(model, path, input_size=16, batch=1, check=False)
    return path


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)


def test_onnxruntime_profile_times_the_call(small_onnx, x, tmp_path, monkeypatch):
    from dcd_deploy.bench import profile

    monkeypatch.setattr(profile, "_clock", _fake_clock())
    b = profile.profile_onnx(small_onnx, x, threads=1, runs=3, warmup=2, trace_dir=tmp_path)
    assert b.runs == 3
    assert b.wall_ms == pytest.approx(STEP_MS)


def test_openvino_profile_times_the_call(small_onnx, x, monkeypatch):
    pytest.importorskip("openvino")
    from dcd_deploy.bench import openvino_profile

    monkeypatch.setattr(openvino_profile, "_clock", _fake_clock())
    b = openvino_profile.profile_openvino(small_onnx, x, threads=1, runs=3, warmup=2)
    assert b.wall_ms == pytest.approx(STEP_MS)
    assert b.nodes_ms > 0  # the node counters were read all the same
