"""count_complexity against PyTorch's own counter (torch.utils.flop_counter) on static models.

FlopCounterMode counts FLOPs = 2 · MAdds for convolutions and matrix products and leaves
pooling out; count_complexity counts one add per element of an average pool. On a
static model, where every other layer is a conv or a linear, the two must then agree
exactly once the pooling adds (measured here with hooks) are taken off.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dcd_deploy import create_model
from dcd_deploy.bench.complexity import count_complexity

SIZE = 224


def _flop_counter_madds_and_pool_adds(model: nn.Module) -> tuple[int, int]:
    pool_adds = 0

    def on_pool(module, inputs, output):
        nonlocal pool_adds
        assert output.shape[-2:] == (1, 1), "only global pools: one add per input element"
        pool_adds += inputs[0].numel()

    pools = [
        m.register_forward_hook(on_pool) for m in model.modules() if isinstance(m, (nn.AvgPool2d, nn.AdaptiveAvgPool2d))
    ]
    x = torch.zeros(1, 3, SIZE, SIZE, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    for hook in pools:
        hook.remove()
    flops = counter.get_total_flops()
    assert flops % 2 == 0
    return flops // 2, pool_adds


@pytest.mark.parametrize("name", ["mobilenetv2_100", "mobilenetv2_035", "resnet18", "resnet50"])
def test_static_madds_agree_with_torch_flop_counter(name):
    with torch.device("meta"):
        model = create_model(name)
    madds, pool_adds = _flop_counter_madds_and_pool_adds(model)
    c = count_complexity(model, input_size=SIZE)
    assert pool_adds > 0
    assert c.madds_latent == c.madds_weight == c.madds_min == madds + pool_adds
