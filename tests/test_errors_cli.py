"""Hard inputs through the installed console scripts: one ``Error:`` line, exit 1, no file.

Every bad input in :data:`CASES` runs the real ``dcd-export`` / ``dcd-validate`` /
``dcd-bench`` executables (next to ``sys.executable``) in a subprocess and must give

* exit status 1,
* a last stderr line ``Error: ...`` naming the key fact (the case's needles), and only
  one such line,
* no ``Traceback`` on stderr,
* no output: the requested file does not exist, and the output directory and the
  working directory hold nothing (no temporary or partial file either).

The cases run forked from one interpreter that imported torch once
(``_cli.run_scripts``: each would otherwise be mostly torch's import time); a case whose
hook is a ``sitecustomize`` starts the script from a fresh interpreter, as a user does.
Cases the CLI cannot reach are tested through the Python API below the table: a layer
the exporter cannot lower (the CLI only ever builds zoo architectures, all lowerable,
even from a trusted pickled module) and a parity failure of ``export_onnx``. A parity
failure *is* forced through ``dcd-export`` with a ``sitecustomize`` hook that makes
the tolerance negative, and through ``dcd-validate`` by validating against an ONNX file
exported from other weights.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import random
import stat
import subprocess
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _cli import run_script, run_scripts
from click.testing import CliRunner
from torch import nn

from dcd_deploy import create_model, export_onnx, pseudo_train, save_checkpoint
from dcd_deploy.errors import DCDDeployError, ExportError, ParityError

SIZE = 32  # every export that could succeed by mistake stays small
MARKER = "UNPICKLED_MARKER"


def run(script: str, *args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_script(script, *args, cwd=cwd, env=env)


# -- inputs ----------------------------------------------------------------------------


class _Double(nn.Module):
    def forward(self, x):
        return x * 2


class _Marker:
    """Unpickling this creates ``path`` (what a malicious checkpoint would do, harmlessly)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


class _ShellMarker:
    """The classic payload: unpickling runs a shell command (here: create a marker file)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch '{self.path}'",)


PARITY_HOOK = """\
# Injected by tests/test_errors_cli.py: every parity check fails.
import dcd_deploy.parity as _parity
_parity.DEFAULT_ATOL = -1.0
_parity.DEFAULT_RTOL = 0.0
_parity.DEFAULT_K = -1.0
"""

BUG_HOOK = """\
# Injected by tests/test_errors_cli.py: a bug (not a DCDDeployError) inside the toolkit.
import dcd_deploy.checkpoint as _checkpoint

def _broken(*args, **kwargs):
    raise RuntimeError("injected bug, not a user error")

_checkpoint.load_checkpoint = _broken
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """Real files built once: checkpoints of mobilenetv2_035 in every format, hooks."""
    a = tmp_path_factory.mktemp("assets")
    model = create_model("mobilenetv2_035")
    save_checkpoint(model, a / "m035.pt")
    sd = model.state_dict()
    torch.save(sd, a / "sd035.pt")
    torch.save(sd, a / "legacy035.pt", _use_new_zipfile_serialization=False)
    # missing (4 keys), unexpected (1) and, against mobilenetv2_050, mis-shaped keys
    doctored = {
        k: v
        for k, v in sd.items()
        if not k.startswith("classifier.") and k not in ("features.0.1.weight", "features.0.1.bias")
    }
    doctored["extra_head.weight"] = torch.zeros(3)
    torch.save(doctored, a / "doctored.pt")
    torch.save(model, a / "fullmodule.pt")  # a pickled nn.Module needs full unpickling
    with warnings.catch_warnings():  # torch.jit.script is deprecated; old archives still exist
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(_Double()).save(str(a / "torchscript.pt"))
    # a valid ONNX file of mobilenetv2_035 with other weights (pseudo-train seed 1)
    export_onnx(
        pseudo_train(create_model("mobilenetv2_035"), seed=1, input_size=SIZE),
        a / "seed1.onnx",
        input_size=SIZE,
        check=False,
    )
    (a / "parity_hook").mkdir()
    (a / "parity_hook" / "sitecustomize.py").write_text(PARITY_HOOK)
    (a / "bug_hook").mkdir()
    (a / "bug_hook" / "sitecustomize.py").write_text(BUG_HOOK)
    return a


def _half_of(asset: str) -> Callable[[Path, Path], bytes]:
    def data(d: Path, a: Path) -> bytes:
        raw = (a / asset).read_bytes()
        return raw[: len(raw) // 2]

    return data


def _zip_of_something_else(d: Path, a: Path) -> bytes:
    with zipfile.ZipFile(d / "tmp.zip", "w") as zf:
        zf.writestr("README.txt", "release notes\n")
        zf.writestr("weights/readme.md", "nothing to see\n")
    raw = (d / "tmp.zip").read_bytes()
    (d / "tmp.zip").unlink()
    return raw


def _marker_pickle(d: Path, a: Path) -> bytes:
    return pickle.dumps({"state_dict": {"w": _Marker(str(d / MARKER))}}, protocol=2)


def _saved(obj, d: Path) -> bytes:
    path = d / "tmp.pt"
    torch.save(obj, path)
    raw = path.read_bytes()
    path.unlink()
    return raw


def _marker_torch_save(d: Path, a: Path) -> bytes:
    return _saved({"arch": "mobilenetv2_035", "state_dict": {"w": _Marker(str(d / MARKER))}}, d)


# -- the table -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One bad input. ``args`` may use ``{d}`` (the case's directory) and ``{a}`` (assets)."""

    id: str
    script: str
    args: tuple[str, ...]
    needles: tuple[str, ...]
    files: dict[str, bytes | str | Callable[[Path, Path], bytes]] = field(default_factory=dict)
    output: str = "out/model.onnx"  # must not exist afterwards (relative to {d})
    readonly_out: bool = False  # chmod 0o555 the output directory
    env_hook: str | None = None  # an assets sub-directory put on PYTHONPATH
    stderr_before_error: bool = False  # a report may precede the Error line


EXPORT = ("-o", "{d}/out/model.onnx", "--input-size", str(SIZE))
CASES = [
    # -- paths that are not checkpoint files
    Case("missing-path", "dcd-export", ("{d}/no_such_model.pt", *EXPORT), ("no_such_model.pt", "no such file")),
    Case("directory", "dcd-export", ("{d}/a_dir", *EXPORT), ("a_dir is a directory",), files={"a_dir/": ""}),
    Case("empty-file", "dcd-export", ("{d}/empty.pt", *EXPORT), ("empty.pt is empty",), files={"empty.pt": b""}),
    Case(
        "truncated-checkpoint",
        "dcd-export",
        ("{d}/half.pt", *EXPORT),
        ("half.pt", "truncated"),
        files={"half.pt": _half_of("m035.pt")},
    ),
    Case(
        "truncated-legacy-checkpoint",
        "dcd-export",
        ("{d}/half.pt", "--arch", "mobilenetv2_035", *EXPORT),
        ("half.pt", "truncated"),
        files={"half.pt": _half_of("legacy035.pt")},
    ),
    Case(
        "text-file",
        "dcd-export",
        ("{d}/notes.pt", *EXPORT),
        ("notes.pt is not a PyTorch checkpoint",),
        files={"notes.pt": "epoch 90, top-1 72.8%\nthis is not a checkpoint\n"},
    ),
    Case(
        "random-bytes",
        "dcd-export",
        ("{d}/noise.pt", *EXPORT),
        ("noise.pt is not a PyTorch checkpoint",),
        files={"noise.pt": b"\x13" + random.Random(0).randbytes(4095)},
    ),
    Case(
        "random-bytes-after-pickle-header",
        "dcd-export",
        ("{d}/noise.pt", *EXPORT),
        ("noise.pt is damaged or truncated",),
        files={"noise.pt": b"\x80\x02" + random.Random(1).randbytes(4094)},
    ),
    Case(
        "zip-of-something-else",
        "dcd-export",
        ("{d}/bundle.zip", *EXPORT),
        ("bundle.zip is a zip archive but not a PyTorch checkpoint",),
        files={"bundle.zip": _zip_of_something_else},
    ),
    # -- architectures
    Case(
        "unknown-arch-flag",
        "dcd-export",
        ("{a}/sd035.pt", "--arch", "mobilenetv2_100_dcdd", *EXPORT),
        ("unknown model 'mobilenetv2_100_dcdd'", "did you mean mobilenetv2_100_dcd"),
    ),
    Case(
        "unknown-zoo-name",
        "dcd-export",
        ("mobilenetv2_100_dcdd", *EXPORT),
        ("mobilenetv2_100_dcdd: no such file, and not a model name", "did you mean mobilenetv2_100_dcd"),
    ),
    Case(
        "plain-state-dict-without-arch",
        "dcd-export",
        ("{a}/sd035.pt", *EXPORT),
        ("does not name its architecture", "--arch"),
    ),
    Case(
        "arch-disagrees-with-checkpoint",
        "dcd-export",
        ("{a}/m035.pt", "--arch", "mobilenetv2_050", *EXPORT),
        ("holds a mobilenetv2_035 checkpoint, but arch 'mobilenetv2_050' was given",),
    ),
    Case(
        "state-dict-does-not-fit",
        "dcd-export",
        ("{a}/sd035.pt", "--arch", "mobilenetv2_050", *EXPORT),
        (
            "does not fit mobilenetv2_050",
            "mis-shaped",
            "features.2.conv.6.weight: checkpoint (8, 48, 1, 1) vs model (16, 48, 1, 1)",
            ", ...",
        ),
    ),
    Case(
        "state-dict-missing-unexpected-misshaped",
        "dcd-export",
        ("{a}/doctored.pt", "--arch", "mobilenetv2_050", *EXPORT),
        (
            "does not fit mobilenetv2_050",
            "4 missing (features.0.1.weight, features.0.1.bias, classifier.1.weight, ...)",
            "1 unexpected (extra_head.weight)",
            "mis-shaped (features.2.conv.6.weight: checkpoint (8, 48, 1, 1) vs model (16, 48, 1, 1)",
        ),
    ),
    # -- files that would run code
    Case(
        "pickle-needing-full-unpickling",
        "dcd-export",
        ("{d}/evil.pkl", "--arch", "mobilenetv2_035", *EXPORT),
        ("evil.pkl needs full unpickling", "--trust-checkpoint"),
        files={"evil.pkl": _marker_pickle},
    ),
    Case(
        "pickle-default-protocol-needing-full-unpickling",
        "dcd-export",
        ("{d}/evil.pkl", "--arch", "mobilenetv2_035", *EXPORT),
        ("evil.pkl needs full unpickling", "--trust-checkpoint"),
        files={"evil.pkl": lambda d, a: pickle.dumps({"state_dict": {"w": _Marker(str(d / MARKER))}})},
    ),
    Case(
        "shell-payload-needing-full-unpickling",
        "dcd-export",
        ("{d}/evil.pt", *EXPORT),
        ("evil.pt needs full unpickling", "--trust-checkpoint"),
        files={"evil.pt": lambda d, a: _saved({"state_dict": {"w": _ShellMarker(str(d / MARKER))}}, d)},
    ),
    Case(
        "torch-save-needing-full-unpickling",
        "dcd-export",
        ("{d}/evil.pt", *EXPORT),
        ("evil.pt needs full unpickling", "--trust-checkpoint"),
        files={"evil.pt": _marker_torch_save},
    ),
    Case(
        "pickled-nn-module",
        "dcd-export",
        ("{a}/fullmodule.pt", *EXPORT),
        ("needs full unpickling", "MobileNetV2", "--trust-checkpoint"),
    ),
    Case(
        "torchscript-archive",
        "dcd-export",
        ("{a}/torchscript.pt", *EXPORT),
        ("is a TorchScript archive", "--trust-checkpoint"),
    ),
    # -- inputs the architecture cannot take
    Case(
        "input-size-resnet-fixed-pool",
        "dcd-export",
        ("resnet18_dcd", "--input-size", "100", "-o", "{d}/out/model.onnx"),
        ("input size 100", "fixed 7x7", "use 193-224"),
    ),
    # -- outputs that cannot be written
    Case(
        "output-in-missing-directory",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/missing/sub/model.onnx", "--input-size", str(SIZE)),
        ("missing/sub does not exist",),
        output="missing",
    ),
    Case(
        "output-directory-is-a-file",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/a_file/model.onnx", "--input-size", str(SIZE)),
        ("a_file is not a directory",),
        files={"a_file": b"x"},
        output="a_file/model.onnx",
    ),
    Case(
        "output-in-read-only-directory",
        "dcd-export",
        ("{a}/m035.pt", *EXPORT),
        ("out is not writable",),
        readonly_out=True,
    ),
    # -- parity failure (the hook makes every tolerance negative)
    Case(
        "parity-failure",
        "dcd-export",
        ("{a}/m035.pt", *EXPORT),
        ("parity check failed: FAIL", "atol -1 + rtol 0"),
        env_hook="parity_hook",
        stderr_before_error=True,
    ),
    # -- dcd-validate
    Case(
        "validate-missing-onnx",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/model.onnx", "--json", "{d}/out/report.json"),
        ("model.onnx: no such ONNX file",),
        output="out/report.json",
    ),
    Case(
        "validate-onnx-is-a-directory",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/out", "--json", "{d}/out/report.json"),
        ("no such ONNX file",),
        output="out/report.json",
    ),
    Case(
        "validate-non-onnx-file",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/notes.onnx", "--json", "{d}/out/report.json"),
        ("notes.onnx is not an ONNX model",),
        files={"notes.onnx": "not a protobuf at all \xff\n"},
        output="out/report.json",
    ),
    Case(
        "validate-empty-onnx",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/empty.onnx", "--json", "{d}/out/report.json"),
        ("empty.onnx is empty, not an ONNX model",),
        files={"empty.onnx": b""},
        output="out/report.json",
    ),
    Case(
        "validate-bad-checkpoint",
        "dcd-validate",
        ("{d}/notes.pt", "{a}/seed1.onnx", "--json", "{d}/out/report.json"),
        ("notes.pt is not a PyTorch checkpoint",),
        files={"notes.pt": "text"},
        output="out/report.json",
    ),
    Case(
        "validate-pickle-needing-full-unpickling",
        "dcd-validate",
        ("{d}/evil.pt", "{a}/seed1.onnx", "--json", "{d}/out/report.json"),
        ("evil.pt needs full unpickling", "--trust-checkpoint"),
        files={"evil.pt": _marker_torch_save},
        output="out/report.json",
    ),
    # -- dcd-bench
    Case(
        "bench-json-in-missing-directory",
        "dcd-bench",
        ("complexity", "--json", "{d}/missing/dir/x.json"),
        ("cannot write", "no directory", "missing/dir"),
        output="missing",
    ),
    Case(
        "bench-json-in-read-only-directory",
        "dcd-bench",
        ("complexity", "--json", "{d}/out/x.json"),
        ("cannot write", "x.json"),
        output="out/x.json",
        readonly_out=True,
    ),
]


def _root_writes_read_only_dirs(base: Path) -> bool:
    probe = base / "ro_probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        (probe / "f").write_bytes(b"")
        return True
    except PermissionError:
        return False
    finally:
        probe.chmod(0o755)


def _prepare(case: Case, d: Path, a: Path) -> list[str]:
    (d / "out").mkdir(parents=True)
    (d / "cwd").mkdir()
    for name, content in case.files.items():
        path = d / name
        if name.endswith("/"):
            path.mkdir()
            continue
        data = content(d, a) if callable(content) else content
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    if case.readonly_out:
        (d / "out").chmod(0o555)
    return [arg.format(d=d, a=a) for arg in case.args]


@pytest.fixture(scope="module")
def runs(request, assets, tmp_path_factory):
    """Run the selected cases concurrently; maps case id -> (CompletedProcess, dir) or a skip reason."""
    base = tmp_path_factory.mktemp("cases")
    selected = {
        item.callspec.params["case"].id
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_bad_input" and hasattr(item, "callspec")
    }
    root_writes = _root_writes_read_only_dirs(base)
    results, hooked, forked = {}, {}, {}
    for case in CASES:
        if case.id not in selected:
            continue
        if case.readonly_out and root_writes:
            results[case.id] = (
                "skip",
                "running as root (euid 0): chmod 0o555 does not stop writes, so a read-only directory cannot be made",
            )
            continue
        d = base / case.id
        args = _prepare(case, d, assets)
        env = {"PYTHONPATH": str(assets / case.env_hook)} if case.env_hook else None
        (hooked if case.env_hook else forked)[case.id] = ({"script": case.script, "args": args, "env": env}, d)
    # A hook is a sitecustomize, read by a new interpreter's start: those cases start the
    # script as a user does, beside the rest, forked from one interpreter that imported
    # torch once (their checks are all after the script's first line).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        futures = {
            case_id: pool.submit(run, job["script"], *job["args"], cwd=d / "cwd", env=job["env"])
            for case_id, (job, d) in hooked.items()
        }
        if forked:
            logs = base / "logs"
            logs.mkdir()
            jobs = [{**job, "cwd": d / "cwd"} for job, d in forked.values()]
            for (case_id, (_, d)), result in zip(
                forked.items(), run_scripts(jobs, workdir=logs, workers=1), strict=True
            ):
                results[case_id] = (result, d)
        for case_id, future in futures.items():
            results[case_id] = (future.result(), hooked[case_id][1])
    yield results
    for case in CASES:
        if case.readonly_out and case.id in results and results[case.id][0] != "skip":
            (base / case.id / "out").chmod(0o755)  # let pytest clean up


def error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines, "nothing on stderr"
    return lines[-1]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(runs, case: Case):
    result, d = runs[case.id]
    if result == "skip":
        pytest.skip(d)
    err = result.stderr
    assert result.returncode == 1, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    line = error_line(err)
    assert line.startswith("Error: "), err
    assert sum(ln.startswith("Error:") for ln in err.splitlines()) == 1, err
    if not case.stderr_before_error:
        assert err.strip() == line, f"stderr has more than the Error line:\n{err}"
    for needle in case.needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    # nothing written: the requested file, temporaries, partial files, default outputs
    assert not (d / case.output).exists(), case.output
    assert sorted(p.name for p in (d / "out").iterdir()) == [], "output directory not empty"
    assert sorted(p.name for p in (d / "cwd").iterdir()) == [], "working directory not empty"
    assert not (d / MARKER).exists(), "unpickling ran code from the file"
    if case.env_hook == "parity_hook":  # the report precedes the Error line
        assert "ORT opt" in err and " NO" in err, err


def test_table_covers_every_script():
    assert {c.script for c in CASES} == {"dcd-export", "dcd-validate", "dcd-bench"}
    assert len({c.id for c in CASES}) == len(CASES)


# -- trusted checkpoints ------------------------------------------------------------------


def test_trust_checkpoint_loads_a_pickled_module_with_a_warning(assets, tmp_path):
    out = tmp_path / "m.onnx"
    result = run(
        "dcd-export",
        assets / "fullmodule.pt",
        "--trust-checkpoint",
        "--input-size",
        SIZE,
        "--no-check",
        "--no-simplify",
        "-o",
        out,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "trust_checkpoint=True: this runs any code stored in the file" in result.stderr
    assert out.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# -- parity failures -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def validate_mismatch(assets, tmp_path_factory):
    """dcd-validate of mobilenetv2_035 (seed 0) against an export of other weights (seed 1)."""
    d = tmp_path_factory.mktemp("validate_mismatch")
    return run(
        "dcd-validate",
        "mobilenetv2_035",
        assets / "seed1.onnx",
        "--seed",
        "0",
        "--batch-sizes",
        "1,2",
        "--num-inputs",
        "2",
        cwd=d,
    ), d


def test_validate_parity_failure_exits_1_with_the_report(validate_mismatch):
    result, d = validate_mismatch
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[0].startswith("ORT opt")
    assert " NO" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("FAIL at ")  # the first layer out of bound
    assert list(d.iterdir()) == []


def test_validate_parity_failure_has_an_error_line(validate_mismatch):
    result, _ = validate_mismatch
    assert result.returncode == 1
    assert error_line(result.stderr).startswith("Error: parity check failed")


# -- a bug is not a user error ---------------------------------------------------------------


def test_a_bug_keeps_its_traceback_in_the_installed_script(assets, tmp_path):
    result = run(
        "dcd-export",
        assets / "m035.pt",
        "-o",
        tmp_path / "m.onnx",
        cwd=tmp_path,
        env={"PYTHONPATH": str(assets / "bug_hook")},
    )
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert error_line(result.stderr) == "RuntimeError: injected bug, not a user error"
    assert not any(ln.startswith("Error:") for ln in result.stderr.splitlines())
    assert not (tmp_path / "m.onnx").exists()


def test_a_bug_propagates_through_run_cli(monkeypatch, tmp_path):
    from dcd_deploy.cli import export as export_cli

    def broken(*args, **kwargs):
        raise RuntimeError("injected bug")

    monkeypatch.setattr(export_cli, "resolve_model", broken)
    result = CliRunner().invoke(export_cli.main, ["whatever.pt", "-o", str(tmp_path / "m.onnx")])
    assert isinstance(result.exception, RuntimeError) and not isinstance(result.exception, DCDDeployError)
    assert "Error:" not in result.output
    with pytest.raises(RuntimeError, match="injected bug"):
        CliRunner().invoke(export_cli.main, ["whatever.pt"], catch_exceptions=False)


def test_a_user_error_becomes_one_line_in_process(monkeypatch):
    from dcd_deploy.cli import export as export_cli

    def user_error(*args, **kwargs):
        raise ExportError("first line\nsecond line")

    monkeypatch.setattr(export_cli, "resolve_model", user_error)
    result = CliRunner().invoke(export_cli.main, ["whatever.pt"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr == "Error: first line second line\n"


# -- layers the exporter cannot lower (Python API: the CLI only builds zoo models) -----------


class _Functional(nn.Module):
    def forward(self, x):
        return F.gelu(x)


class _Net(nn.Module):
    def __init__(self, mid: nn.Module):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Sequential(nn.BatchNorm2d(8), mid)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return torch.flatten(self.head(self.body(self.stem(x))), 1)


@pytest.mark.parametrize(
    "mid",
    [
        nn.GELU(),
        nn.LayerNorm([8, 8, 8]),
        nn.Upsample(scale_factor=2),
        nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"),
        _Functional(),
    ],
    ids=["GELU", "LayerNorm", "Upsample", "reflect-padding", "functional-gelu"],
)
def test_layers_the_old_emitter_refused_now_export(tmp_path, mid):
    """These once stopped the export (issue 18); torch.onnx writes them now, parity-checked."""
    path = tmp_path / "m.onnx"
    result = export_onnx(_Net(mid).eval(), path, input_size=8)
    assert result and result.parity
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# -- parity failure and atomic writes of export_onnx -----------------------------------------


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.flatten(torch.relu(self.bn(self.conv(x))), 1)


def test_export_parity_failure_writes_nothing(tmp_path, monkeypatch):
    import dcd_deploy.parity as parity

    monkeypatch.setattr(parity, "DEFAULT_ATOL", -1.0)
    monkeypatch.setattr(parity, "DEFAULT_RTOL", 0.0)
    monkeypatch.setattr(parity, "DEFAULT_K", -1.0)
    path = tmp_path / "m.onnx"
    with pytest.raises(ParityError) as info:
        export_onnx(_Tiny().eval(), path, input_size=8)
    report = info.value.report
    assert report is not None and not report and report.rows and not any(r.passed for r in report.rows)
    assert str(info.value).startswith("parity check failed: FAIL")
    assert list(tmp_path.iterdir()) == []


def test_export_parity_failure_keeps_the_previous_file(tmp_path, monkeypatch):
    import dcd_deploy.parity as parity

    path = tmp_path / "m.onnx"
    path.write_bytes(b"previous good model")
    monkeypatch.setattr(parity, "DEFAULT_ATOL", -1.0)
    monkeypatch.setattr(parity, "DEFAULT_K", -1.0)
    with pytest.raises(ParityError):
        export_onnx(_Tiny().eval(), path, input_size=8)
    assert path.read_bytes() == b"previous good model"
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_export_replaces_an_existing_file_on_success(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")
    result = export_onnx(_Tiny().eval(), path, input_size=8)
    assert result and path.read_bytes() != b"old" and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_exported_file_has_the_umask_mode(tmp_path):
    """An atomic write must not leave mkstemp's owner-only 0o600 on the model."""
    path = tmp_path / "m.onnx"
    export_onnx(_Tiny().eval(), path, input_size=8, check=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()


def test_export_json_in_missing_directory_leaves_no_onnx(assets, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = run(
        "dcd-export",
        assets / "m035.pt",
        "--input-size",
        SIZE,
        "--no-check",
        "--no-simplify",
        "-o",
        out / "model.onnx",
        "--json",
        tmp_path / "missing" / "report.json",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert error_line(result.stderr).startswith("Error: cannot write")
    assert list(out.iterdir()) == []


def test_unsafe_pickle_message_names_the_blocked_global(tmp_path):
    from dcd_deploy import load_checkpoint
    from dcd_deploy.errors import UnsafeCheckpointError

    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": _ShellMarker(str(tmp_path / MARKER))}}, path)
    with pytest.raises(UnsafeCheckpointError) as info:
        load_checkpoint(path)
    assert not (tmp_path / MARKER).exists()
    assert "--trust-checkpoint" in str(info.value)
    assert "system" in str(info.value)


def test_read_only_output_directory_via_api(tmp_path, monkeypatch):
    """Root ignores chmod, so emulate a read-only directory where the exporter asks the OS."""
    import os

    import dcd_deploy as dd
    from dcd_deploy.errors import ExportError

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else real_access(p, mode))
    with pytest.raises(ExportError, match="not writable"):
        dd.export_onnx(dd.create_model("mobilenetv2_035"), tmp_path / "m.onnx", input_size=32, check=False)
    assert list(tmp_path.iterdir()) == []
