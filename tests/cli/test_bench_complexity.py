"""dcd-bench --complexity end to end, and the CLI error contract (run_cli)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from dcd_deploy.bench.paper import PAPER_ROWS
from dcd_deploy.cli._outputs import write_json_atomic
from dcd_deploy.cli._run import run_cli
from dcd_deploy.cli.bench import main
from dcd_deploy.errors import DCDDeployError

RECORD_KEYS = {
    "table",
    "row",
    "model",
    "kwargs",
    "params_m",
    "madds_m",
    "paper_params_m",
    "paper_madds_m",
    "params_dev_pct",
    "madds_dev_pct",
    "madds_form",
    "params_convention",
    "status",
    "note",
}
STATIC_TOL_PCT = 2.0
# The paper's ResNet-10 params (5.2M) fit neither convention (the zoo's 4.91M excluding,
# 5.42M including the classifier) while its MAdds match: a known, annotated miss.
PARAMS_UNEXPLAINED = {("4b", "ResNet-10 static")}


@pytest.fixture(scope="module")
def complexity_run(tmp_path_factory):
    """One counting run (about 10 s) for every test here: the JSON on stdout (``--json -``),
    the table and progress on stderr; ``out`` holds that JSON."""
    out = tmp_path_factory.mktemp("bench") / "out.json"
    result = CliRunner().invoke(main, ["complexity", "--json", "-"])
    out.write_text(result.stdout, encoding="utf-8")
    return result, out


def test_complexity_json_has_one_record_per_paper_row(complexity_run):
    result, out = complexity_run
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text(encoding="utf-8"))  # stdout is the JSON document alone
    assert data["schema"] == "dcd-bench.complexity/2" and data["version"] and data["input_size"] == 224
    records = data["records"]
    assert len(records) == len(PAPER_ROWS)
    assert [(r["table"], r["row"]) for r in records] == [(p.table, p.row) for p in PAPER_ROWS]
    for r in records:
        assert RECORD_KEYS <= r.keys()
        assert r["status"] in ("ok", "miss")
        assert r["madds_form"] in ("min", "any")
        assert r["status"] == "ok" or r["note"], f"{r['table']} {r['row']}: a miss needs a note"


def test_complexity_reports_each_model_counted_on_stderr(complexity_run):
    result, _ = complexity_run
    counts = [line for line in result.stderr.splitlines() if line.startswith("[count] ")]
    distinct = {(p.model, tuple(sorted(p.kwargs.items()))) for p in PAPER_ROWS}
    assert len(counts) == len(distinct)
    assert counts[-1].startswith(f"[count] {len(distinct)}/{len(distinct)} ")
    assert not any(line.startswith("[count]") for line in result.stdout.splitlines())


def test_static_rows_within_tolerance(complexity_run):
    _, out = complexity_run
    records = json.loads(out.read_text(encoding="utf-8"))["records"]
    static = [r for r in records if not r["model"].endswith(("_dcd", "_dyconv", "_condconv"))]
    assert len(static) == 11
    for r in static:
        assert abs(r["madds_dev_pct"]) <= STATIC_TOL_PCT, r
        if (r["table"], r["row"]) in PARAMS_UNEXPLAINED:
            assert r["status"] == "miss" and r["note"]
        else:
            assert r["status"] == "ok", r


# DCD rows whose params no zoo configuration reaches (the notes give the figures).
DCD_PARAMS_UNEXPLAINED = {("4b", "ResNet-10 DCD"), ("4b", "ResNet-50 DCD")}


def test_dcd_rows_within_tolerance(complexity_run):
    """Every DCD row of Tables 1-4 within 5% of the paper, but the two annotated ones."""
    _, out = complexity_run
    records = json.loads(out.read_text(encoding="utf-8"))["records"]
    dcd = [r for r in records if r["model"].endswith("_dcd")]
    assert len(dcd) == 31
    for r in dcd:
        assert abs(r["madds_dev_pct"]) <= 5.0, r
        if (r["table"], r["row"]) in DCD_PARAMS_UNEXPLAINED:
            assert r["status"] == "miss" and r["note"]
        else:
            assert abs(r["params_dev_pct"]) <= 5.0 and r["status"] == "ok", r


def test_complexity_table_is_printed(complexity_run):
    result, _ = complexity_run
    lines = result.stderr.splitlines()  # with --json -, the table goes to stderr
    for p in PAPER_ROWS:
        assert any(line.startswith(f"{p.table:<3} {p.row}") for line in lines), p.row
    assert "Legend:" in result.stderr


def test_latency_options_with_complexity_are_a_usage_error():
    result = CliRunner().invoke(main, ["complexity", "--models", "mobilenetv2_035"])
    assert result.exit_code == 2


def test_unsupported_input_size_is_one_error_line():
    result = CliRunner().invoke(main, ["complexity", "--input-size", "160"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    # the progress of the models counted before the failing one, then one Error line
    assert lines[-1].startswith("Error: input size 160")
    assert all(line.startswith("[count] ") for line in lines[:-1])
    assert "Traceback" not in result.output


@click.command()
@click.option("--fail", type=click.Choice(["user", "bug", "none"]), default="none")
@run_cli
def dummy(fail: str) -> None:
    if fail == "user":
        raise DCDDeployError("bad input\non two lines")
    if fail == "bug":
        raise ValueError("a bug")
    click.echo("fine")


def test_run_cli_prints_one_error_line_and_exits_1():
    result = CliRunner().invoke(dummy, ["--fail", "user"])
    assert result.exit_code == 1
    assert result.stderr == "Error: bad input on two lines\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_run_cli_lets_other_exceptions_propagate():
    result = CliRunner().invoke(dummy, ["--fail", "bug"])
    assert isinstance(result.exception, ValueError)
    ok = CliRunner().invoke(dummy, [])
    assert ok.exit_code == 0 and ok.stdout == "fine\n"


def test_write_json_atomic(tmp_path):
    target = tmp_path / "r.json"
    write_json_atomic(target, [{"a": 1}])
    write_json_atomic(target, [{"a": 2}])
    assert json.loads(target.read_text(encoding="utf-8")) == [{"a": 2}]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    with pytest.raises(DCDDeployError, match="cannot write"):
        write_json_atomic(tmp_path / "missing" / "r.json", [])


def test_json_into_missing_directory_fails_before_counting(tmp_path):
    result = CliRunner().invoke(main, ["complexity", "--json", str(tmp_path / "no" / "o.json")])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot write") and result.stdout == ""
