"""The layer record's activation parameter (``activation_alpha``, LeakyReLU's slope;
``activation_slopes``, PReLU's per channel): what the parity check reads from a file, and
refuses when it cannot be the exporter's."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
from onnx import helper

from dcd_deploy.errors import DCDDeployError
from dcd_deploy.exporters.onnx import LAYERS_KEY
from dcd_deploy.parity import read_layers


def _proto(**activation) -> onnx.ModelProto:
    entry = {"path": "a", "kind": "DCD", "form": "latent", "input": "x", "output": "y", "layout": "NHWC"}
    graph = helper.make_graph([], "g", [], [])
    proto = helper.make_model(graph)
    helper.set_model_props(proto, {LAYERS_KEY: json.dumps([{**entry, **activation}])})
    return proto


@pytest.mark.parametrize("alpha", [0.1, 0.01, -0.5, 1.5, 0])
def test_a_leaky_relu_record_carries_its_slope(alpha):
    (record,) = read_layers(Path("f.onnx"), _proto(activation="leaky_relu", activation_alpha=alpha))
    assert record.activation == "leaky_relu" and record.activation_alpha == alpha


def test_a_prelu_record_carries_a_slope_per_channel():
    (record,) = read_layers(Path("f.onnx"), _proto(activation="prelu", activation_slopes=[0.25, -0.5, 2]))
    assert record.activation == "prelu" and record.activation_slopes == [0.25, -0.5, 2]


def test_a_record_written_before_the_parameter_reads_as_before():
    (record,) = read_layers(Path("f.onnx"), _proto(activation="relu"))
    assert record.activation == "relu" and record.activation_alpha == 0.0


@pytest.mark.parametrize(
    "activation",
    [
        {"activation": "leaky_relu"},  # no slope: which one would the check apply?
        {"activation": "leaky_relu", "activation_alpha": float("nan")},
        {"activation": "leaky_relu", "activation_alpha": float("inf")},
        {"activation": "leaky_relu", "activation_alpha": "0.1"},
        {"activation": "leaky_relu", "activation_alpha": True},
        {"activation": "relu", "activation_alpha": 0.1},  # ReLU takes none
        {"activation": "prelu"},  # no slopes
        {"activation": "prelu", "activation_slopes": []},
        {"activation": "prelu", "activation_slopes": 0.25},  # one number is LeakyReLU's parameter
        {"activation": "prelu", "activation_alpha": 0.25},
        {"activation": "prelu", "activation_slopes": [0.25, float("nan")]},
        {"activation": "prelu", "activation_slopes": [0.25, "0.5"]},
        {"activation": "prelu", "activation_slopes": [0.25], "activation_alpha": 0.25},
        {"activation": "leaky_relu", "activation_slopes": [0.25]},
        {"activation": "relu", "activation_slopes": [0.25]},
    ],
)
def test_a_record_with_a_slope_the_exporter_cannot_have_written_is_refused(activation):
    with pytest.raises(DCDDeployError, match=f"malformed {LAYERS_KEY} entry for 'a'"):
        read_layers(Path("f.onnx"), _proto(**activation))


def test_the_recorded_slope_is_the_one_applied():
    # the layer-wise check's recomputation: the record's function on a known tensor
    from dcd_deploy.parity._layerwise import _apply

    (record,) = read_layers(Path("f.onnx"), _proto(activation="leaky_relu", activation_alpha=-0.5))
    model = torch.nn.Module()
    model.add_module("a", torch.nn.Identity())
    y = _apply(record, model, torch.tensor([-2.0, 0.0, 3.0, float("nan")]), None)
    assert y[:3].tolist() == [1.0, 0.0, 3.0] and torch.isnan(y[3])


def test_the_recorded_slopes_are_applied_per_channel():
    # channels on axis 1, as the check recomputes a layer in PyTorch's NCHW
    from dcd_deploy.parity._layerwise import _apply

    (record,) = read_layers(Path("f.onnx"), _proto(activation="prelu", activation_slopes=[0.5, -1.0]))
    model = torch.nn.Module()
    model.add_module("a", torch.nn.Identity())
    x = torch.tensor([[[[-2.0, 4.0]], [[-2.0, 4.0]]]], dtype=torch.float64)  # (1, 2, 1, 2)
    y = _apply(record, model, x, None)
    assert y.dtype == torch.float64 and y.flatten().tolist() == [-1.0, 4.0, 2.0, 4.0]


def test_slopes_of_another_count_than_the_layers_channels_are_a_malformed_record():
    # a tampered record: one line through the check, not PyTorch's RuntimeError
    from dcd_deploy.parity._layerwise import _apply

    (record,) = read_layers(Path("f.onnx"), _proto(activation="prelu", activation_slopes=[0.5, -1.0, 2.0]))
    model = torch.nn.Module()
    model.add_module("a", torch.nn.Identity())
    with pytest.raises(DCDDeployError, match="3 activation_slopes for a layer of 2 channels"):
        _apply(record, model, torch.zeros(1, 2, 1, 2, dtype=torch.float64), None)
