"""dcd-bench frontier end to end on a few small models (--quick, no timing asserted),
and the option checks of every mode."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dcd_deploy.bench.frontier import SCHEMA
from dcd_deploy.cli.bench import main

FEW = [
    "frontier",
    "--quick",
    "--models",
    "mobilenetv2_035,mobilenetv2_035_dcd",
    "--input-size",
    "64",
    "--backends",
    "torch-deploy",
]


def test_frontier_cli_writes_json_and_markdown(tmp_path):
    result = CliRunner().invoke(main, FEW + ["--json", str(tmp_path / "f.json"), "--markdown", str(tmp_path / "f.md")])
    assert result.exit_code == 0, result.output
    assert "top-1: the paper's Table 4" in result.stdout and "ms: measured here" in result.stdout
    data = json.loads((tmp_path / "f.json").read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA and len(data["records"]) == 2
    assert all(r["top1"] and r["p50_ms"] > 0 for r in data["records"])
    assert (tmp_path / "f.md").read_text(encoding="utf-8").startswith("# dcd-bench frontier")


def test_frontier_json_to_stdout():
    result = CliRunner().invoke(main, FEW + ["--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == SCHEMA


def test_frontier_plot(tmp_path):
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(main, FEW + ["--plot", str(tmp_path / "f.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, code, text",
    [
        (["frontier", "--backends", "torch,onnxruntime"], 2, "dcd-bench frontier times one backend, not 2"),
        (["frontier", "--models", "resnet34"], 1, "Error: not in the paper's Table 4: resnet34"),
        (["frontier", "--profile"], 2, "dcd-bench frontier does not take --profile (it applies to dcd-bench latency)"),
        (["--frontier", "--floor"], 2, "--floor and --frontier are separate runs"),
        (
            ["complexity", "--plot", "x.png"],
            2,
            "dcd-bench complexity does not take --plot (it applies to dcd-bench latency and frontier)",
        ),
    ],
)
def test_frontier_and_mode_option_errors(args, code, text):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    assert text in result.output
