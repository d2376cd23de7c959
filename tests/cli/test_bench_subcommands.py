"""dcd-bench's subcommands, and the 0.1 mode flags that still reach them with a deprecation note."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from dcd_deploy.cli.bench import legacy_args, main

COMMANDS = ("latency", "frontier", "floor", "complexity", "summary")
TINY = ["--quick", "--models", "mobilenetv2_035,mobilenetv2_035_dcd", "--input-size", "64"]


@pytest.mark.parametrize(
    "old, new, note",
    [
        (
            ["--frontier", "--quick"],
            ["frontier", "--quick"],
            "'dcd-bench --frontier' is deprecated; use 'dcd-bench frontier'",
        ),
        (["--quick", "--floor"], ["floor", "--quick"], "'dcd-bench --floor' is deprecated; use 'dcd-bench floor'"),
        (["--complexity"], ["complexity"], "'dcd-bench --complexity' is deprecated; use 'dcd-bench complexity'"),
        (["--threads", "1"], ["latency", "--threads", "1"], "use 'dcd-bench latency [options]'"),
        ([], ["latency"], "use 'dcd-bench latency [options]'"),
    ],
)
def test_old_flags_become_subcommands_with_a_note(old, new, note):
    args, said = legacy_args(old, COMMANDS)
    assert args == new
    assert said.startswith("note: ") and note in said


@pytest.mark.parametrize("args", [["frontier", "--quick"], ["--help"], ["--version"], ["--list-models"], ["summary"]])
def test_new_spelling_is_left_alone(args):
    assert legacy_args(args, COMMANDS) == (args, None)


def test_two_mode_flags_are_a_usage_error():
    with pytest.raises(click.UsageError, match="--floor and --frontier are separate runs"):
        legacy_args(["--frontier", "--floor"], COMMANDS)


def _frontier(tmp_path, name, *first):
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(main, [*first, *TINY, "--backends", "torch-deploy", "--json", str(out)])
    return result, json.loads(out.read_text(encoding="utf-8")) if out.exists() else None


def test_old_and_new_frontier_give_the_same_result(tmp_path):
    old, old_doc = _frontier(tmp_path, "old", "--frontier")
    new, new_doc = _frontier(tmp_path, "new", "frontier")
    assert old.exit_code == new.exit_code == 0, old.output + new.output
    assert old.stderr.splitlines()[0] == "note: 'dcd-bench --frontier' is deprecated; use 'dcd-bench frontier'"
    assert "deprecated" not in new.stderr
    # measured, so different run to run: the times, and the order (records are sorted by p50)
    drop = ("p50_ms", "mean_ms", "p90_ms", "n_runs", "on_frontier")

    def same(doc):
        return sorted(({k: v for k, v in r.items() if k not in drop} for r in doc["records"]), key=lambda r: r["name"])

    assert same(old_doc) == same(new_doc)
    assert old_doc["settings"] == new_doc["settings"]


@pytest.mark.parametrize(
    "old, new",
    [
        (["--backends", "torch,tensorrt"], ["latency", "--backends", "torch,tensorrt"]),
        (["--complexity", "--input-size", "100x120"], ["complexity", "--input-size", "100x120"]),
        (["--floor", "--markdown", "x.md"], ["floor", "--markdown", "x.md"]),
    ],
)
def test_old_and_new_usage_errors_agree(old, new):
    a, b = CliRunner().invoke(main, old), CliRunner().invoke(main, new)
    assert a.exit_code == b.exit_code == 2
    assert a.stderr.strip().splitlines()[-1] == b.stderr.strip().splitlines()[-1]


def test_old_and_new_output_errors_agree(tmp_path):
    missing = str(tmp_path / "no" / "c.json")
    a = CliRunner().invoke(main, ["--complexity", "--json", missing])
    b = CliRunner().invoke(main, ["complexity", "--json", missing])
    assert a.exit_code == b.exit_code == 1
    assert (
        a.stderr.splitlines()[1:]
        == b.stderr.splitlines()
        == [f"Error: cannot write {missing}: no directory {tmp_path / 'no'}"]
    )


@pytest.mark.parametrize(
    "command, has, lacks",
    [
        ("latency", ["--profile", "--baseline", "--batch", "--plot"], ["--backend,"]),
        ("frontier", ["--backend, --backends", "--plot", "[default: 20;"], ["--profile", "--batch", "--baseline"]),
        ("floor", ["--models", "--runs"], ["--markdown", "--plot", "--backends", "--profile"]),
        ("complexity", ["--json", "--markdown", "--input-size"], ["--models", "--threads", "--quick", "--plot"]),
    ],
)
def test_each_subcommand_has_its_own_options(command, has, lacks):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    for text in has:
        assert text in result.stdout, text
    for text in lacks:
        assert text not in result.stdout, text


def test_group_help_lists_the_subcommands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert all(f"  {c} " in result.stdout for c in COMMANDS)


def test_quiet_drops_progress_lines():
    args = ["frontier", *TINY, "--backends", "torch-deploy"]
    loud, quiet = CliRunner().invoke(main, args), CliRunner().invoke(main, args + ["-q"])
    assert loud.exit_code == quiet.exit_code == 0
    assert "[build]" in loud.stderr and quiet.stderr == ""
    assert "frontier" in quiet.stdout
