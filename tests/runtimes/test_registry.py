"""One registry of backends: every name the benchmark, the parity check and the CLI
accept is the registry's, and every backend names a runtime that loads."""

from __future__ import annotations

import click
import pytest

from dcd_deploy import parity
from dcd_deploy.bench import latency
from dcd_deploy.cli.validate import main as validate
from dcd_deploy.errors import DCDDeployError
from dcd_deploy.runtimes import BACKENDS, PARITY_BACKENDS, PARITY_CONFIGS, RUNTIMES, backend, runner_class


def test_the_lists_come_from_the_registry():
    assert latency.BACKENDS == tuple(BACKENDS)
    assert set(latency.FILE_BACKENDS) == {b.name for b in BACKENDS.values() if b.source in ("onnx", "fused")}
    assert set(latency.OPENVINO_BACKENDS) == {b.name for b in BACKENDS.values() if b.runtime == "openvino"}
    assert parity.BACKENDS == PARITY_BACKENDS == tuple(PARITY_CONFIGS)
    choice = next(p for p in validate.params if p.name == "backends").type
    assert isinstance(choice, click.Choice) and tuple(choice.choices) == PARITY_BACKENDS


def test_every_backend_is_described_and_has_a_runtime():
    for b in BACKENDS.values():
        assert b.runtime in RUNTIMES and b.title and b.legend and "\n" not in b.legend
        assert runner_class(b.runtime).runtime == b.runtime
    for runtime in PARITY_CONFIGS:
        assert runtime in RUNTIMES
    with pytest.raises(DCDDeployError, match="unknown backend 'tensorrt'"):
        backend("tensorrt")
