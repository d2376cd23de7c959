"""dcd-bench latency mode end to end (--quick, small inputs) and its option handling.

No test asserts a timing: only that the figures exist, have the right types and that the
files are written.
"""

from __future__ import annotations

import builtins
import json

import pytest
from click.testing import CliRunner

from dcd_deploy import __version__
from dcd_deploy.bench.latency import SCHEMA
from dcd_deploy.bench.profile import GROUPS
from dcd_deploy.cli.bench import main

MODELS = "mobilenetv2_035,mobilenetv2_035_dcd"
QUICK = ["latency", "--models", MODELS, "--input-size", "64", "--quick"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    args = QUICK + [
        "--backends",
        "torch,onnxruntime",
        "--profile",
        "--json",
        str(out / "r.json"),
        "--markdown",
        str(out / "r.md"),
    ]
    return CliRunner().invoke(main, args), out


def test_quick_run_prints_the_table(quick_run):
    result, _ = quick_run
    assert result.exit_code == 0, result.output + str(result.exception)
    out = result.stdout
    assert "CPU " in out and "threads 1" in out and "input 64x64" in out and "onnxruntime" in out
    for column in (
        "params M",
        "MAdds M",
        "mean ms",
        "p50 ms",
        "p90 ms",
        "DCD/static",
        "mean ratio",
        "CPU ratio",
        "paper ms",
        "paper ratio",
    ):
        assert column in out
    rows = [line for line in out.splitlines() if line.startswith("mobilenetv2_035 ")]
    assert len(rows) >= 4  # 2 variants x 2 backends (+ the profile table's first line)
    assert "ONNX Runtime profile" in out and "dynamic branch" in out
    assert "[torch]" in result.stderr and "[onnxruntime]" in result.stderr  # progress on stderr
    assert "[torch]" not in out
    assert out.index("1. torch:") < out.index("2. onnxruntime:") < out.index("Summary:")


def test_quick_run_json_schema(quick_run):
    _, out = quick_run
    data = json.loads((out / "r.json").read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA and data["version"] == __version__
    m = data["machine"]
    assert m["threads"] == 1 and m["batch"] == 1 and m["input_size"] == 64
    assert isinstance(m["cpu"], str) and isinstance(m["cores"], int) and m["torch"] and m["onnxruntime"]
    assert data["settings"]["quick"] is True and data["settings"]["backends"] == ["torch", "onnxruntime"]
    recs = data["records"]
    assert [(r["backend"], r["variant"]) for r in recs] == [
        ("torch", "static"),
        ("torch", "dcd"),
        ("onnxruntime", "static"),
        ("onnxruntime", "dcd"),
    ]
    for r in recs:
        assert r["model"] == "mobilenetv2_035" and r["source"] == "zoo"
        assert r["n_runs"] >= 5 and isinstance(r["n_runs"], int)
        assert 0 < r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["max_ms"]
        assert r["first_run_ms"] > 0 and r["params_m"] > 1.0 and r["madds_m"] > 1.0
        assert r["paper_ms"] is None  # the paper timed x0.5 and x1.0 only
        assert r["cpu_p50_ms"] > 0  # one thread: the timing thread's CPU time is reported
        if r["variant"] == "dcd":
            assert r["ratio_cpu"] > 0 and r["ratio_p10"] > 0
            lo, hi = r["ratio_ci95"]
            assert lo <= r["ratio_to_static"] <= hi and r["madds_form"] == "min"
        else:
            assert r["ratio_to_static"] is None and r["madds_form"] == "any"
    assert recs[3]["dcd_forms"] and sum(recs[3]["dcd_forms"].values()) > 0  # the export's forms
    profiles = data["profiles"]
    assert [p["variant"] for p in profiles] == ["static", "dcd"]
    for p in profiles:
        assert set(p["groups"]) == set(GROUPS)
        assert p["nodes_ms"] == pytest.approx(sum(g["ms"] for g in p["groups"].values()))
    assert profiles[0]["groups"]["dynamic_branch"]["nodes"] == 0
    assert profiles[1]["groups"]["dynamic_branch"]["nodes"] > 0
    assert not list(out.glob(".*.tmp"))


def test_quick_run_markdown(quick_run):
    _, out = quick_run
    text = (out / "r.md").read_text(encoding="utf-8")
    assert text.startswith("# dcd-bench latency")
    assert "| model | variant | backend |" in text and "| mobilenetv2_035 | dcd | onnxruntime |" in text
    assert "## Profile (where the time goes)" in text and "ONNX Runtime profile" in text


def _hide_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_plot_without_matplotlib_fails_before_timing(monkeypatch, tmp_path):
    _hide_matplotlib(monkeypatch)
    result = CliRunner().invoke(main, QUICK + ["--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 1
    assert "Error: --plot needs matplotlib" in result.stderr and "pip install matplotlib" in result.stderr
    assert "[build]" not in result.stderr  # nothing was built or timed
    assert not (tmp_path / "p.png").exists()


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(main, QUICK + ["--backends", "torch", "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_openvino_is_said(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    result = CliRunner().invoke(main, QUICK + ["--backends", "openvino"])
    assert result.exit_code == 1
    assert "openvino not installed, openvino skipped" in result.stderr
    assert "Error: no backend left to run" in result.stderr


def test_unknown_backend_is_a_usage_error():
    result = CliRunner().invoke(main, ["latency", "--backends", "torch,tensorrt"])
    assert result.exit_code == 2 and "unknown backend tensorrt" in result.output


def test_latency_options_are_refused_with_complexity():
    result = CliRunner().invoke(main, ["complexity", "--models", "mobilenetv2_050", "--quick"])
    assert result.exit_code == 2
    assert (
        "dcd-bench complexity does not take --models (it applies to dcd-bench latency, frontier and floor)"
        in result.output
    )


def test_missing_output_directory_fails_first(tmp_path):
    result = CliRunner().invoke(main, QUICK + ["--markdown", str(tmp_path / "nope" / "r.md")])
    assert result.exit_code == 1 and "Error: cannot write" in result.stderr
    assert "[build]" not in result.stderr


def test_unknown_model_is_a_user_error():
    result = CliRunner().invoke(main, ["latency", "--models", "mobilenetv2_05", "--quick", "--backends", "torch"])
    assert result.exit_code == 1 and "not a model name" in result.stderr


def test_a_dcd_checkpoint_with_dots_in_its_name_gets_its_ratio(tmp_path):
    from dcd_deploy import create_model, save_checkpoint

    path = tmp_path / "mv2_x0.35_official.pth.tar"
    save_checkpoint(create_model("mobilenetv2_035_dcd"), path)
    result = CliRunner().invoke(
        main,
        [
            "latency",
            "--models",
            f"mobilenetv2_035,{path}",
            "--input-size",
            "64",
            "--quick",
            "--backends",
            "torch",
            "--json",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # --json -: the JSON alone on stdout
    dcd = next(r for r in data["records"] if r["name"] == "mv2_x0.35_official")
    assert dcd["variant"] == "dcd" and dcd["model"] == "mobilenetv2_035" and dcd["ratio_to_static"] > 0
    assert "DCD/static" in result.stderr  # the table went to stderr


def test_torch_paper_needs_one_thread():
    result = CliRunner().invoke(main, QUICK + ["--backends", "torch-paper", "--threads", "2"])
    assert result.exit_code == 1 and "Error: torch-paper is the paper's single-thread condition" in result.stderr


def test_profile_under_paper_conditions_is_printed_first():
    result = CliRunner().invoke(main, QUICK + ["--backends", "torch-paper", "--profile"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("PyTorch profile under the paper's conditions") < out.index("ONNX Runtime profile")
    assert out.index("1. torch-paper:") < out.index("Summary:")
