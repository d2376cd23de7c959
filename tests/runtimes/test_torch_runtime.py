"""The eager PyTorch runner keeps the runner contract.

Oracle: NumPy computing the module's function; a spy module reading PyTorch's settings
during the call.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _tiny import SCALE, SHIFT, oracle, sample

from dcd_deploy.errors import BackendLoadError, BackendRunError
from dcd_deploy.runtimes import load_runner


class Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * torch.from_numpy(SCALE) + torch.from_numpy(SHIFT))


class Spy(torch.nn.Module):
    """Records the thread count and the oneDNN flag seen inside the call."""

    def forward(self, x):
        self.seen = (torch.get_num_threads(), torch.backends.mkldnn.enabled)
        return x


def test_run_and_bind_compute_the_module():
    x = sample()
    runner = load_runner("torch", Tiny())
    np.testing.assert_allclose(runner.run({"x": x})["output"], oracle(x)[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(runner.bind({"x": torch.from_numpy(x)})().numpy(), oracle(x)[0], rtol=1e-6, atol=1e-6)


def test_threads_and_onednn_only_around_the_call():
    before = torch.get_num_threads(), torch.backends.mkldnn.enabled
    spy = Spy()
    load_runner("torch", spy, threads=2, onednn=False).run({"x": sample()})
    assert spy.seen == (2, False)
    assert (torch.get_num_threads(), torch.backends.mkldnn.enabled) == before
    load_runner("torch", spy, threads=None).bind({"x": torch.zeros(1)})()
    assert spy.seen == before
    assert "oneDNN off, 2 thread(s)" in load_runner("torch", spy, threads=2, onednn=False).describe().legend


def test_errors_are_backend_errors():
    with pytest.raises(BackendRunError, match="PyTorch failed running Tiny"):
        load_runner("torch", Tiny()).run({"x": np.zeros((1, 5, 2, 2), np.float32)})
    with pytest.raises(BackendLoadError, match="extra outputs need an ONNX runtime"):
        load_runner("torch", Tiny(), extra_outputs=("h",))
    with pytest.raises(BackendLoadError, match="threads must be a positive integer"):
        load_runner("torch", Tiny(), threads=0)
