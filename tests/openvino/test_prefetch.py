"""The next op's branch weights prefetched during a fused op's GEMM (``DCD_DEPLOY_PREFETCH``).

Each ``DCDPointwise`` learns at run time which op ran after it on the thread and fetches
that op's branch weights into L2 while its own GEMM runs. It is a hint: the outputs must
be the same bits with it on and off, whatever the order the ops run in, across compiled
models interleaved on one thread and on two, and after a successor's model is destroyed
(its link must not keep anything the prefetching op could fault on). The oracle is the
model compiled with the lever off (``DCD_DEPLOY_PREFETCH=0``, read when the op is made)
and, for the values, the PyTorch model in float64.
"""

from __future__ import annotations

import gc
import math
import threading

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("openvino")

from dcd_deploy import export_onnx  # noqa: E402
from dcd_deploy.layers import DCDConv2d  # noqa: E402
from dcd_deploy.openvino import compile_onnx  # noqa: E402


class Chain(nn.Module):
    """Four pointwise DCD layers in a row (SE and ReLU gates, 1x1 and 2x2 pooling, one
    residual): each fused op has a successor whose weights it prefetches."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 1)
        self.a = DCDConv2d(16, 96, 1, latent_dim=8, gate="se")
        self.b = DCDConv2d(96, 24, 1, latent_dim=10, pool_size=2)
        self.c = DCDConv2d(24, 24, 1, latent_dim=6, gate="se")
        self.d = DCDConv2d(24, 40, 1, latent_dim=8)

    def forward(self, x):
        y = torch.relu(self.a(self.stem(x)))
        y = self.b(y)
        y = y + self.c(y)
        return torch.flatten(self.d(y), 1)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    torch.manual_seed(0)
    model = Chain()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:  # larger Φ and Λ heads than the init: Λ and Φ vary per sample
                gain = 2.0 if name.endswith(("fc_phi.weight", "fc_scale.weight")) else 1.0
                p.normal_(0, gain / math.sqrt(p[0].numel()))
    model.eval()
    path = tmp_path_factory.mktemp("prefetch") / "chain.onnx"
    export_onnx(model, path, input_size=12, mode="fused", batch=1, check=False)
    return model, path


def compiled(path, monkeypatch, on: bool):
    monkeypatch.setenv("DCD_DEPLOY_PREFETCH", "1" if on else "0")
    return compile_onnx(path, input_shape=(1, 3, 12, 12)).create_infer_request()


def run(request, x):
    return np.array(next(iter(request.infer({0: x}).values())))


def close(got, want64):
    """fp32 against the float64 model: within 1e-3 of the output's scale."""
    np.testing.assert_allclose(got, want64, rtol=1e-3, atol=1e-3 * float(np.abs(want64).max()))


def inputs(n):
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(n)]


def test_prefetch_changes_no_bit(chain, monkeypatch):
    model, path = chain
    with torch.no_grad():
        ref64 = model.double()
        xs = inputs(6)
        want = [ref64(torch.from_numpy(x).double()).numpy() for x in xs]
        model.float()
    off = compiled(path, monkeypatch, on=False)
    on = compiled(path, monkeypatch, on=True)
    on2 = compiled(path, monkeypatch, on=True)
    # interleaved: each model's last op links to the other model's first, and on/on2 take
    # turns being the successor of each other's ops
    for i, x in enumerate(xs):
        order = [on, off, on2] if i % 2 else [on2, on, off]
        outs = {id(r): run(r, x) for r in order}
        base = outs[id(off)]
        close(base, want[i])
        for r in (on, on2):
            assert np.array_equal(outs[id(r)], base)
    # the successor's model destroyed: the ops that linked to it run on
    del on2
    gc.collect()
    for i, x in enumerate(xs):
        assert np.array_equal(run(on, x), run(off, x))
        close(run(on, x), want[i])


def test_prefetch_on_two_threads(chain, monkeypatch):
    _, path = chain
    off = compiled(path, monkeypatch, on=False)
    xs = inputs(8)
    want = [run(off, x) for x in xs]
    requests = [compiled(path, monkeypatch, on=True) for _ in range(3)]
    errors = []

    def worker(request, order):
        try:
            for _ in range(3):
                for i in order:
                    if not np.array_equal(run(request, xs[i]), want[i]):
                        errors.append(i)
        except Exception as e:  # noqa: BLE001 (reported by the assert below)
            errors.append(repr(e))

    threads = [
        threading.Thread(target=worker, args=(requests[0], range(8))),
        threading.Thread(target=worker, args=(requests[1], range(7, -1, -1))),
    ]
    for t in threads:
        t.start()
    # and a third model on this thread meanwhile, with the first thread's successors
    for _ in range(3):
        for i in range(8):
            assert np.array_equal(run(requests[2], xs[i]), want[i])
    for t in threads:
        t.join()
    assert errors == []
