"""Conventions every command shares: --version, dcd-export -q, dcd-bench --list-models."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from click.testing import CliRunner

import dcd_deploy
from dcd_deploy import create_model, list_models
from dcd_deploy.cli.bench import main as bench_main
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main
from dcd_deploy.errors import ParityError

COMMANDS = {"dcd-export": export_main, "dcd-validate": validate_main, "dcd-bench": bench_main}


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_version_is_the_installed_distributions(name):
    result = run(COMMANDS[name], ["--version"])
    assert result.exit_code == 0, result.output
    # The installed metadata is read from dcd_deploy/_version.py at build time: one source.
    installed = importlib.metadata.version("dcd-deploy")
    assert installed == dcd_deploy.__version__
    assert result.output == f"{name}, version {installed}\n"


def test_export_quiet_prints_only_the_wrote_line(tmp_path):
    out, report = tmp_path / "m.onnx", tmp_path / "m.json"
    result = run(export_main, ["mobilenetv2_035", "--input-size", 32, "-o", out, "--json", report, "-q"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    [line] = result.stdout.splitlines()
    assert line.startswith(f"wrote {out} (")
    assert out.is_file()
    assert json.loads(report.read_text())["parity"]["passed"] is True  # quiet, not less work


def test_export_quiet_and_verbose_exclude_each_other(tmp_path):
    result = run(export_main, ["mobilenetv2_035", "-o", tmp_path / "m.onnx", "-q", "-v"])
    assert result.exit_code == 2
    assert "-q/--quiet and -v/--verbose" in result.stderr
    assert list(tmp_path.iterdir()) == []


class _Report:
    ill_conditioned = False
    synthetic_inputs = True
    verdict = "FAIL"
    first_failing_layer = None

    def table(self) -> str:
        return "PARITY TABLE"

    def summary(self) -> str:
        return "FAIL: max abs 1"


@pytest.mark.parametrize("quiet", [False, True])
def test_export_parity_failure_keeps_its_error_line_when_quiet(tmp_path, monkeypatch, quiet):
    def failing_export(*args, **kwargs):
        raise ParityError("parity check failed: FAIL: max abs 1", _Report())

    monkeypatch.setattr("dcd_deploy.exporters.onnx.export_onnx", failing_export)
    result = run(
        export_main, ["mobilenetv2_035", "--input-size", 32, "-o", tmp_path / "m.onnx"] + (["-q"] if quiet else [])
    )
    assert result.exit_code == 1
    # stdout has at most the progress of the stages that finished (none with -q)
    assert all(line.startswith("[") for line in result.stdout.splitlines())
    assert (result.stdout == "") is quiet
    lines = result.stderr.splitlines()
    assert lines[-1] == "Error: parity check failed: FAIL: max abs 1"
    assert ("PARITY TABLE" in lines) is not quiet


def test_list_models_prints_the_zoo_with_parameter_counts():
    result = run(bench_main, ["--list-models"])
    assert result.exit_code == 0, result.output
    rows = dict(
        line.split() for line in result.stdout.splitlines() if line.split() and line.split()[0] in set(list_models())
    )
    assert list(rows) == list_models()
    # Counted on the meta device; a real build is the oracle.
    for name in ("mobilenetv2_035_dcd", "resnet10_condconv"):
        params = sum(p.numel() for p in create_model(name).parameters())
        assert rows[name] == f"{params / 1e6:.2f}"
    assert rows["mobilenetv2_100_dcd"] == "5.72"  # the authors' published count
