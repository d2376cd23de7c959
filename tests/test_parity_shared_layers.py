"""A layer called twice in ``forward`` (weights shared between two places, as recurrent and
siamese networks do) is recorded, and checked on its own, once per call.

Oracle: the record's tensors are the graph's own (each call's Conv node reads the
recorded input and its last node writes the recorded output), and a file whose second
call alone is wrong (its Conv given a copy of the weight scaled by 5%) fails at that
layer: the first call and every other layer stay within bound on their own inputs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy import check_parity, export_onnx
from dcd_deploy.layers import DCDConv2d

CHECK = {"batch_sizes": (2,), "n_inputs": 2}


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.d = DCDConv2d(16, 16, 1)
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.d(x))
        x = F.relu(self.conv(x))
        x = F.relu(self.d(x))  # the same DCD layer again
        x = F.relu(self.conv(x))  # and the same convolution
        return self.head(x.mean((2, 3)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = Twice().eval()
    path = tmp_path_factory.mktemp("twice") / "twice.onnx"
    export_onnx(model, path, input_size=32, check=False)
    return model, path


def _record(proto) -> list[dict]:
    return json.loads({p.key: p.value for p in proto.metadata_props}["dcd_deploy.layers"])


def test_each_call_is_recorded_with_its_own_tensors(exported):
    _, path = exported
    proto = onnx.load(str(path))
    record = _record(proto)
    assert [e["path"] for e in record] == ["stem", "d", "conv", "d", "conv", "head"]
    producer = {o: n for n in proto.graph.node for o in n.output}
    convs = [e for e in record if e["path"] == "conv"]
    assert convs[0]["output"] != convs[1]["output"] and convs[0]["input"] != convs[1]["input"]
    for e in convs:
        node = producer[e["output"]]
        assert node.op_type == "Conv" and node.input[0] == e["input"]


def test_the_correct_file_passes_every_call(exported):
    model, path = exported
    report = check_parity(model, path, **CHECK)
    assert report, report.summary()
    checked = [r.path for r in report.layers if r.backend == "onnxruntime" and r.optimization == "all"]
    assert checked.count("conv") == 2 and checked.count("d") == 2


def test_a_wrong_second_call_fails_at_its_layer(exported, tmp_path):
    model, path = exported
    proto = onnx.load(str(path))
    second = [e for e in _record(proto) if e["path"] == "conv"][1]
    node = next(n for n in proto.graph.node if second["output"] in n.output)
    weight = next(t for t in proto.graph.initializer if t.name == node.input[1])
    wrong = onnx.numpy_helper.from_array((onnx.numpy_helper.to_array(weight) * 1.05).astype(np.float32), "conv_w_wrong")
    proto.graph.initializer.append(wrong)
    node.input[1] = wrong.name
    tampered = tmp_path / "tampered.onnx"
    onnx.save(proto, str(tampered))
    report = check_parity(model, tampered, **CHECK)
    assert not report
    bad = [r for r in report.layers if not r.passed]
    assert bad and {r.path for r in bad} == {"conv"}, report.layer_table()
    assert report.first_failing_layer.path == "conv"
