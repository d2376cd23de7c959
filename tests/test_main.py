"""``python -m dcd_deploy``: dispatch to the three commands, usage line; installed entry points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dcd_deploy import __version__, list_models
from dcd_deploy.__main__ import COMMANDS, USAGE, main

BIN = Path(sys.executable).parent


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(USAGE)
    assert all(f"\n  {name} " in out for name in COMMANDS)


@pytest.mark.parametrize("argv, message", [([], None), (["frob"], "unknown command 'frob'")])
def test_missing_or_unknown_command_is_a_usage_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == USAGE
    assert err[1:] == ([f"error: {message}"] if message else [])


@pytest.mark.parametrize("name", list(COMMANDS))
def test_subcommand_runs_the_click_command_under_its_own_name(capsys, name):
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"Usage: python -m dcd_deploy {name} [OPTIONS]")
    with pytest.raises(SystemExit) as info:
        main([name, "--version"])
    assert info.value.code == 0
    # The version line names the command as installed, however it was started.
    assert capsys.readouterr().out == f"dcd-{name}, version {__version__}\n"


def test_subcommand_passes_its_arguments_on(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--list-models"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in list_models())


def test_installed_entry_points():
    runs = [[sys.executable, "-m", "dcd_deploy", "--help"]] + [
        [str(BIN / f"dcd-{name}"), "--version"] for name in COMMANDS
    ]
    procs = [subprocess.run(cmd, capture_output=True, text=True, timeout=300) for cmd in runs]
    assert all(p.returncode == 0 and "Traceback" not in p.stderr for p in procs), [p.stderr for p in procs]
    assert procs[0].stdout.startswith(USAGE)
    assert [p.stdout for p in procs[1:]] == [f"dcd-{name}, version {__version__}\n" for name in COMMANDS]


#: Run in a fresh interpreter: the package and the commands load no torch until a command
#: gets past its options; then every public name resolves to its module's object.
LAZY = """
import sys
import dcd_deploy, dcd_deploy.__main__
from dcd_deploy.cli import bench, export, validate
for main, args in ((export.main, ["m.pt", "--input-size", "5000"]), (validate.main, ["--version"]),
                   (bench.main, ["latency", "--threads", "1000"])):
    try:
        main(args)
    except SystemExit as exc:
        print(exc.code)
print("torch" in sys.modules, "onnx" in sys.modules)
from dcd_deploy import *
from dcd_deploy import checkpoint, conversion, exporters, models, openvino, parity
assert (create_model, list_models, pseudo_train) == (models.create_model, models.list_models, models.pseudo_train)
assert (load_checkpoint, save_checkpoint) == (checkpoint.load_checkpoint, checkpoint.save_checkpoint)
assert (to_deploy, export_onnx, check_parity) == (exporters.to_deploy, exporters.export_onnx, parity.check_parity)
assert (convert, to_static, openvino_extension) == (conversion.convert, conversion.to_static, openvino.openvino_extension)
assert set(dcd_deploy.__all__) <= set(dir(dcd_deploy))
print(sorted(dcd_deploy.__all__) == sorted(n for n in dcd_deploy.__all__ if n in globals()))
"""


def test_the_package_and_the_commands_load_torch_only_when_a_command_needs_it():
    proc = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # usage error (2), --version (0), usage error (2); no torch, no onnx; every name resolved
    assert proc.stdout.splitlines() == ["2", f"dcd-validate, version {__version__}", "0", "2", "False False", "True"]
    assert "Traceback" not in proc.stderr
