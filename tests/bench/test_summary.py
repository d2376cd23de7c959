"""The demo's closing summary, read from latency and frontier JSON documents built here."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dcd_deploy.bench.summary import load_documents, story_lines
from dcd_deploy.cli.bench import main
from dcd_deploy.errors import DCDDeployError


def _rec(backend, variant, p50, *, ratio=None, ci=None, paper=None, model="mobilenetv2_100"):
    return {
        "model": model,
        "variant": variant,
        "backend": backend,
        "p50_ms": p50,
        "ratio_to_static": ratio,
        "ratio_ci95": ci,
        "paper_ratio": paper,
        "paper_conditions": backend == "torch-paper",
    }


def _latency() -> dict:
    # mobilenetv2_100: static / DCD ms per backend; the ratios are DCD / static of these ms.
    ms = {
        "torch-paper": (73.0, 81.0),
        "onnxruntime": (6.0, 13.8),
        "openvino": (5.9, 13.6),
        "openvino-fused": (6.0, 8.4),
    }
    records = []
    for backend, (s, d) in ms.items():
        records.append(_rec(backend, "static", s))
        records.append(
            _rec(
                backend,
                "dcd",
                d,
                ratio=d / s,
                ci=[d / s - 0.02, d / s + 0.02],
                paper=1.116 if backend == "torch-paper" else None,
            )
        )
    return {"schema": "dcd-bench.latency/2", "records": records}


def _frontier() -> dict:
    def row(label, variant, top1, p50, on):
        return {
            "name": label,
            "label": label,
            "family": "MobileNetV2",
            "variant": variant,
            "top1": top1,
            "p50_ms": p50,
            "on_frontier": on,
        }

    return {
        "schema": "dcd-bench.frontier/1",
        "settings": {"backend": "openvino-fused"},
        "records": [
            row("x0.5", "static", 65.4, 3.0, True),
            row("x0.5 DCD", "dcd", 69.8, 4.0, False),
            row("x1.0", "static", 72.1, 3.9, True),
            row("x1.0 DCD", "dcd", 74.8, 8.0, True),
            row("x0.5 DY-Conv", "dyconv", 69.0, 3.5, True),
            row("x0.75", "static", 69.5, 5.0, False),
        ],
    }


def test_story_from_both_documents():
    lines = story_lines({"latency": _latency(), "frontier": _frontier()})
    text = "\n".join(lines)
    # 81 / 73 = 1.1096 under the paper's conditions, beside the paper's 1.116
    assert "mobilenetv2_100 dcd: 1.11 [1.09-1.13], the paper 1.116" in text
    assert "the paper's conditions" in text
    # the fused DCD model is the fastest DCD deployment: 8.4 / 6.0 = 1.40;
    # the standard ops' best: 13.8 / 6.0 = 2.30 (OpenVINO: 13.6 / 5.9 = 2.305)
    fastest = next(ln for ln in lines if "openvino-fused 8.40" in ln)
    assert "mobilenetv2_100 dcd: openvino-fused 8.40 ms vs static 6.00 ms = 1.40" in fastest
    assert "standard ops at best 2.30 (onnxruntime)" in fastest
    # x1.0 DCD is on the frontier; x0.5 DCD is beaten by x1.0 static (faster, more accurate)
    assert any("pays off" in ln and "openvino-fused" in ln for ln in lines)
    payoff = next(ln for ln in lines if "MobileNetV2:" in ln)
    assert "DCD on the frontier: x1.0 DCD (8.0 ms, 74.8%)" in payoff
    assert "off it: x0.5 DCD (4.0 ms, 69.8%; x1.0 is 3.9 ms, 72.1%)" in payoff
    assert "DY-Conv on it: x0.5 DY-Conv" in payoff
    # x0.75 static (5.0 ms, 69.5%): x1.0 DCD is more accurate but slower; x0.5 DCD is faster and more accurate
    assert "x0.5 DCD beats x0.75 (5.0 ms, 69.5%)" in payoff
    assert len(lines) <= 8


def test_preemption_is_warned_and_the_cpu_ratio_shown():
    doc = _latency()
    assert not any("warning" in ln for ln in story_lines({"latency": doc}))
    paper = next(r for r in doc["records"] if r["backend"] == "torch-paper" and r["variant"] == "dcd")
    paper.update(cpu_p50_ms=paper["p50_ms"] / 1.5, ratio_cpu=1.08)  # wall 50% over CPU time
    text = "\n".join(story_lines({"latency": doc}))
    assert "(CPU time 1.08)" in text and "wall p50 up to 50% over CPU p50" in text


def test_not_at_the_paper_conditions_is_said():
    doc = _latency()
    for r in doc["records"]:
        r["paper_conditions"] = False
    assert "NOT the paper's batch 1, 224x224" in "\n".join(story_lines({"latency": doc}))


def test_a_directory_is_read_and_other_json_skipped(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps(_latency()), encoding="utf-8")
    (tmp_path / "frontier.json").write_text(json.dumps(_frontier()), encoding="utf-8")
    (tmp_path / "complexity.json").write_text(json.dumps({"schema": "dcd-bench.complexity/1"}), encoding="utf-8")
    assert set(load_documents([tmp_path])) == {"latency", "frontier"}
    result = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Summary\n") and "pays off" in result.stdout


def test_a_named_file_of_another_kind_is_an_error(tmp_path):
    other = tmp_path / "c.json"
    other.write_text(json.dumps({"schema": "dcd-bench.complexity/1"}), encoding="utf-8")
    with pytest.raises(DCDDeployError, match="not a dcd-bench latency or frontier document"):
        load_documents([other])
    broken = tmp_path / "b.json"
    broken.write_text("{", encoding="utf-8")
    result = CliRunner().invoke(main, ["summary", str(broken)])
    assert result.exit_code == 1 and result.stderr.startswith("Error: ") and "not a JSON document" in result.stderr
