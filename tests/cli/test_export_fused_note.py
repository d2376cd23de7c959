"""dcd-export --mode fused with a dynamic axis tells how to compile the file in OpenVINO at
a static shape (at a dynamic one its layout changes around the fused nodes run as
reference ops: docs/performance.md, "Round seven"); a static file, or a standard one,
gets no such note."""

from __future__ import annotations

import pytest
from _user_net import write_factory
from click.testing import CliRunner

from dcd_deploy.cli.export import main as export_main

NOTE = "reshape to a static shape before compiling"


@pytest.fixture
def in_user_dir(tmp_path, monkeypatch):
    write_factory(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("extra", "reshape"),
    [
        ([], "model.reshape([1, 3, 32, 48])"),
        (["--batch", "dynamic"], "model.reshape([1, 3, 32, 48])"),
        (["--dynamic-size"], "model.reshape([1, 3, 32, 48])"),
        (["--batch", "2", "--dynamic-size"], "model.reshape([2, 3, 32, 48])"),
        (["--batch", "1"], None),
        (["--mode", "standard"], None),
    ],
)
def test_the_note_names_the_static_shape(in_user_dir, extra, reshape):
    args = ["tiny.py:build", "--input-size", "32x48", "--mode", "fused", "--no-check", *extra]
    result = CliRunner().invoke(export_main, args)
    assert result.exit_code == 0, result.output
    if reshape is None:
        assert NOTE not in result.stdout
    else:
        assert NOTE in result.stdout and reshape in result.stdout
