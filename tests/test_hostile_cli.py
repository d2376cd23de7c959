"""Hostile inputs through the installed commands (issue #12): no crash, no leftovers,
no blow-ups, never destroy a file.

Every case in :data:`CASES` runs ``dcd-export`` / ``dcd-validate`` / ``dcd-bench`` in a
subprocess whose address space is capped at `_hostile.MEMORY_CAP` (so a regression fails
the test instead of exhausting the machine; forked from one interpreter that imported
torch once, ``_cli.run_scripts``, unless the case's hook needs a fresh one) and must end with

* the expected exit status (1 for a user error, 2 for click's usage errors),
* exactly one ``Error:`` line, the last one, naming the key fact, and no traceback,
* no temporary file left beside any output, and every guarded file (the input, a FIFO,
  a device node, a link) exactly as it was.

The hostile files are built cheaply in the test's directory: pickles written opcode by
opcode, sparse files made with ``truncate``, small zip bombs. The termination tests
send SIGTERM/SIGHUP at a deterministic point (a ``sitecustomize`` hook announces it with
a marker file and waits).

Round 3 (issue #21) adds ``--inputs`` files (a deflate bomb built without deflating, a
lying ``.npy`` header, sparse and meta tensors), an openvino that fails to import, long
and non-UTF-8 output names, warnings and over-long messages, and SIGTERM while ONNX
Runtime is inside a ``Loop`` of 10^15 iterations (helpers in ``tests/_hostile.py``).

Usage errors that click's range checks raise while parsing (:data:`USAGE_CASES`) hold
the same contract in process: starting the script adds nothing there (the table keeps
one usage error of the real script).
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import signal
import stat
import subprocess
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _cli import BIN, TIMEOUT, run_script, run_scripts
from _hostile import MEMORY_CAP, cap_memory, inputs_bomb, sigterm_inside_inference

from dcd_deploy import create_model, export_onnx, save_checkpoint
from dcd_deploy.errors import DCDDeployError, ExportError

SIZE = 32
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def run(script: str, *args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_script(script, *args, cwd=cwd, env=env, preexec_fn=cap_memory)


# -- hostile files ------------------------------------------------------------------------


def _deep_tuple_key(depth: int) -> bytes:
    """``{((...(),),): 1}`` nested ``depth`` deep: protocol 2, one TUPLE1 opcode per level."""
    return b"\x80\x02}" + b")" + b"\x85" * depth + b"K\x01s."


def _bytearray_bomb() -> bytes:
    """36 bytes that unpickle to ``bytearray(4_000_000_000)`` (bytearray is allowed by weights_only)."""
    return b"\x80\x02cbuiltins\nbytearray\n\x8a\x05" + (4_000_000_000).to_bytes(5, "little") + b"\x85R."


def _zip_bomb(path: Path) -> None:
    """A torch-looking zip whose data.pkl inflates about 1000x (100 MB from 100 kB)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02" + bytes(100 << 20))


def _ours(config: dict, state_dict: dict | None = None) -> dict:
    return {
        "format": "dcd-deploy",
        "format_version": 1,
        "arch": "mobilenetv2_035",
        "config": config,
        "state_dict": state_dict or {"w": torch.zeros(1)},
    }


def _onnx(path: Path, shape, *, elem=None, props=None, n_inputs=1, fail_at_run_time=False) -> None:
    import onnx
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT if elem is None else elem
    inputs = [helper.make_tensor_value_info(f"x{i}", elem, shape) for i in range(n_inputs)]
    out = helper.make_tensor_value_info("y", elem, None)
    inits = []
    if fail_at_run_time:  # a Reshape no input can satisfy
        inits = [helper.make_tensor("s", TensorProto.INT64, [2], [7, 7])]
        nodes = [helper.make_node("Reshape", ["x0", "s"], ["y"])]
    elif inputs:
        nodes = [helper.make_node("Identity", ["x0"], ["y"])]
    else:
        nodes = [helper.make_node("Constant", [], ["y"], value=helper.make_tensor("c", TensorProto.FLOAT, [1], [1.0]))]
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [out], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    if props:
        helper.set_model_props(model, props)
    onnx.save(model, path)


DISK_FULL_HOOK = """\
# Injected by tests/test_hostile_cli.py: the disk fills up while the ONNX file is written.
import errno, onnx
def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")
onnx.save = _full
onnx.save_model = _full
"""

MEMORY_HOOK = """\
# Injected by tests/test_hostile_cli.py: the machine runs out of memory while loading.
import dcd_deploy.checkpoint as _checkpoint
def _oom(*args, **kwargs):
    raise MemoryError()
_checkpoint.load_checkpoint = _oom
"""

# Announces the point where a signal must arrive (a marker file), then waits for it.
WAIT_HOOK = """\
# Injected by tests/test_hostile_cli.py: stop at {where} until a signal arrives.
import os, time
import {module} as _mod
_real = _mod.{name}
def _waiting(*args, **kwargs):
    result = _real(*args, **kwargs) if {after} else None
    open(os.environ["DCD_TEST_MARKER"], "w").close()
    time.sleep(120)
    return result
_mod.{name} = _waiting
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    a = tmp_path_factory.mktemp("hostile_assets")
    save_checkpoint(create_model("mobilenetv2_035"), a / "m035.pt")
    for name, text in (("disk_full", DISK_FULL_HOOK), ("oom", MEMORY_HOOK)):
        (a / name).mkdir()
        (a / name / "sitecustomize.py").write_text(text)
    (a / "broken_openvino" / "openvino").mkdir(parents=True)
    (a / "broken_openvino" / "openvino" / "__init__.py").write_text(BROKEN_OPENVINO)
    return a


# An openvino that fails to import, as one with a missing shared library does.
BROKEN_OPENVINO = """\
raise ImportError("libopenvino.so.2641: cannot open shared object file: No such file or directory")
"""


def _npy_with_shape(name: str, shape: str):
    """A float32 .npy whose header claims ``shape`` (e.g. a negative dimension)."""

    def make(d: Path, a: Path) -> None:
        import numpy as np

        np.save(d / name, np.zeros((1, 3, SIZE, SIZE), np.float32))
        data = (d / name).read_bytes()
        (d / name).write_bytes(
            data.replace(f"(1, 3, {SIZE}, {SIZE})".encode(), shape.encode().ljust(len(f"(1, 3, {SIZE}, {SIZE})")))
        )

    return make


# -- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One hostile input. ``args`` may use ``{d}`` (the case's directory) and ``{a}`` (assets).

    ``make`` builds files in ``{d}``; every file it leaves there is guarded: after the run it
    must have the same type, size, mode, inode, link target and (regular files) content.
    """

    id: str
    script: str
    args: tuple[str, ...]
    needles: tuple[str, ...]
    make: Callable[[Path, Path], None] | None = None
    status: int = 1
    env_hook: str | None = None
    root_only: bool = False
    progress_before_error: bool = False  # dcd-bench announces its plan before loading models


def _files(**contents) -> Callable[[Path, Path], None]:
    def make(d: Path, a: Path) -> None:
        for name, data in contents.items():
            (d / name).write_bytes(data)

    return make


def _saved(name: str, obj_fn: Callable[[], object]) -> Callable[[Path, Path], None]:
    def make(d: Path, a: Path) -> None:
        torch.save(obj_fn(), d / name)

    return make


def _copy_m035(name: str = "m.pt"):
    def make(d: Path, a: Path) -> None:
        (d / name).write_bytes((a / "m035.pt").read_bytes())

    return make


def _both(*makers):
    def make(d: Path, a: Path) -> None:
        for m in makers:
            m(d, a)

    return make


def _fifo(name: str):
    return lambda d, a: os.mkfifo(d / name)


def _char_device(name: str):
    # a private /dev/null: if a regression replaced it, only this node is lost
    return lambda d, a: os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _symlink(name: str, target: str):
    return lambda d, a: os.symlink(target, d / name)


def _hardlink(name: str, target: str):
    return lambda d, a: os.link(d / target, d / name)


def _onnx_file(name: str, shape, **kw):
    return lambda d, a: _onnx(d / name, shape, **kw)


def _sparse(name: str, size: int):
    def make(d: Path, a: Path) -> None:
        with open(d / name, "wb") as f:
            f.truncate(size)

    return make


OUT = ("-o", "{d}/out.onnx", "--input-size", str(SIZE))
VALIDATE = ("{a}/m035.pt", "{d}/m.onnx")
CASES = [
    # -- outputs that must never be replaced
    Case(
        "output-char-device",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/null", "--input-size", str(SIZE)),
        ("null is a character device", "refusing to replace it"),
        make=_char_device("null"),
        root_only=True,
    ),
    Case(
        "output-fifo",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/fifo", "--input-size", str(SIZE)),
        ("fifo is a FIFO",),
        make=_fifo("fifo"),
    ),
    Case(
        "json-fifo", "dcd-export", ("{a}/m035.pt", *OUT, "--json", "{d}/fifo"), ("fifo is a FIFO",), make=_fifo("fifo")
    ),
    Case(
        "output-symlink-to-fifo",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/link", "--input-size", str(SIZE)),
        ("fifo (via the symlink", "is a FIFO"),
        make=_both(_fifo("fifo"), _symlink("link", "fifo")),
    ),
    Case(
        "output-directory",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/adir", "--input-size", str(SIZE)),
        ("adir is a directory",),
        make=lambda d, a: (d / "adir").mkdir(),
    ),
    Case(
        "output-trailing-separator",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/newdir/", "--input-size", str(SIZE)),
        ("ends in a path separator",),
        status=2,
    ),
    Case(
        "output-is-the-input",
        "dcd-export",
        ("{d}/m.pt", "-o", "{d}/m.pt", "--input-size", str(SIZE)),
        ("is the same file as the input",),
        make=_copy_m035(),
    ),
    Case(
        "output-links-to-the-input",
        "dcd-export",
        ("{d}/m.pt", "-o", "{d}/link.onnx", "--input-size", str(SIZE)),
        ("is the same file as the input",),
        make=_both(_copy_m035(), _symlink("link.onnx", "m.pt")),
    ),
    Case(
        "output-hard-link",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/b.onnx", "--input-size", str(SIZE)),
        ("b.onnx has 2 hard links",),
        make=_both(_files(**{"a.onnx": b"old"}), _hardlink("b.onnx", "a.onnx")),
    ),
    Case(
        "json-is-the-output",
        "dcd-export",
        ("{a}/m035.pt", *OUT, "--json", "{d}/out.onnx"),
        ("is the same file as the output",),
    ),
    Case(
        "json-is-the-input",
        "dcd-export",
        ("{d}/m.pt", *OUT, "--json", "{d}/m.pt"),
        ("is the same file as the input",),
        make=_copy_m035(),
    ),
    # -- checkpoints that crash, hang or blow up torch's loader
    Case(
        "tuple-key-a-million-deep",
        "dcd-export",
        ("{d}/deep.pt", "--arch", "mobilenetv2_035", *OUT),
        ("deep.pt is not a plausible checkpoint", "more than 100 levels deep"),
        make=_files(**{"deep.pt": _deep_tuple_key(1_000_000)}),
    ),
    Case(
        "tuple-key-a-million-deep-bench",
        "dcd-bench",
        ("latency", "--models", "{d}/deep.pt", "--quick"),
        ("more than 100 levels deep",),
        make=_files(**{"deep.pt": _deep_tuple_key(1_000_000)}),
        progress_before_error=True,
    ),
    Case(
        "tuple-key-5000-deep",
        "dcd-export",
        ("{d}/deep.pt", "--arch", "mobilenetv2_035", *OUT),
        ("more than 100 levels deep",),
        make=_files(**{"deep.pt": _deep_tuple_key(5000)}),
    ),
    Case("model-is-a-fifo", "dcd-export", ("{d}/fifo.pt", *OUT), ("fifo.pt is a FIFO",), make=_fifo("fifo.pt")),
    Case("model-is-dev-zero", "dcd-export", ("/dev/zero", *OUT), ("/dev/zero is a character device",)),
    Case(
        "bytearray-4e9",
        "dcd-export",
        ("{d}/ba.pt", "--arch", "mobilenetv2_035", *OUT),
        ("builtins.bytearray", "4000000000", "far larger than the file"),
        make=_files(**{"ba.pt": _bytearray_bomb()}),
    ),
    Case(
        "zip-bomb",
        "dcd-export",
        ("{d}/bomb.pt", *OUT),
        ("archive/data.pkl inflates", "more than 100x"),
        make=lambda d, a: _zip_bomb(d / "bomb.pt"),
    ),
    Case(
        "stride-0-classifier",
        "dcd-export",
        ("{d}/rel.pt", *OUT),
        ("classifier.0.cls.weight is an expanded view of shape (1000000, 1280)",),
        make=_saved(
            "rel.pt",
            lambda: {
                "arch": "mobilenetv2_dcd",
                "epoch": 1,
                "state_dict": {"classifier.0.cls.weight": torch.zeros(1280).expand(1_000_000, 1280)},
            },
        ),
    ),
    Case(
        "meta-tensor",
        "dcd-export",
        ("{d}/t.pt", "--arch", "mobilenetv2_035", *OUT),
        ("entry w is a tensor on device meta",),
        make=_saved("t.pt", lambda: {"w": torch.zeros(3, device="meta")}),
    ),
    Case(
        "sparse-tensor",
        "dcd-export",
        ("{d}/t.pt", "--arch", "mobilenetv2_035", *OUT),
        ("entry w is a sparse_coo tensor",),
        make=_saved("t.pt", lambda: {"w": torch.zeros(3, 3).to_sparse()}),
    ),
    Case(
        "quantized-tensor",
        "dcd-export",
        ("{d}/t.pt", "--arch", "mobilenetv2_035", *OUT),
        ("entry w is a quantized tensor",),
        make=_saved("t.pt", lambda: {"w": torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.qint8)}),
    ),
    *[
        Case(
            f"config-{label}",
            "dcd-export",
            ("{d}/c.pt", *OUT),
            (f"config {key}={shown}",),
            make=_saved("c.pt", lambda key=key, value=value: _ours({key: value})),
        )
        for label, key, value, shown in (
            ("classes-negative", "num_classes", -1, "-1"),
            ("classes-1e7", "num_classes", 10**7, "10000000"),
            ("classes-1e12", "num_classes", 10**12, "1000000000000"),
            ("dropout-nan", "dropout", float("nan"), "nan"),
        )
    ],
    # -- within every range, but too much memory together
    Case(
        "memory-estimate",
        "dcd-export",
        ("mobilenetv2_035", "--input-size", "1024", "--batch", "1024", "-o", "{d}/o.onnx"),
        ("would need about", "GiB of memory", "limit"),
    ),
    # -- ONNX files an image model cannot be checked against (a file of one input that is
    # no image is fed seeded samples of its shape, which the model refuses)
    Case(
        "onnx-rank-2-input",
        "dcd-validate",
        VALIDATE,
        ("MobileNetV2 does not run on the file's inputs ((8, 10))",),
        make=_onnx_file("m.onnx", [1, 10]),
    ),
    Case("onnx-no-input", "dcd-validate", VALIDATE, ("has 0 inputs",), make=_onnx_file("m.onnx", None, n_inputs=0)),
    Case(
        "onnx-float64-input",
        "dcd-validate",
        VALIDATE,
        ("is float64", "float32"),
        make=_onnx_file("m.onnx", [1, 3, 32, 32], elem=11),
    ),
    Case(
        "onnx-rank-3-input",
        "dcd-validate",
        VALIDATE,
        ("MobileNetV2 does not run on the file's inputs ((8, 3, 32))",),
        make=_onnx_file("m.onnx", [1, 3, 32]),
    ),
    Case(
        "onnx-metadata-superscript",
        "dcd-validate",
        VALIDATE,
        ("metadata input_size '²' is not an integer",),
        make=_onnx_file("m.onnx", [1, 3, 32, 32], props={"input_size": "²"}),
    ),
    Case(
        "onnx-metadata-20000-zoo-name",
        "dcd-validate",
        ("mobilenetv2_035", "{d}/m.onnx"),
        ("input size 20000 is outside 1-1024",),
        make=_onnx_file("m.onnx", ["N", 3, "H", "W"], props={"input_size": "20000"}),
    ),
    Case(
        "onnx-sparse-6GB",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/big.onnx"),
        ("big.onnx is 6.0 GiB", "at most 2 GiB"),
        make=_sparse("big.onnx", 6 << 30),
    ),
    Case(
        "onnx-fails-at-run-time",
        "dcd-validate",
        (*VALIDATE, "--batch-sizes", "1"),
        ("ONNX Runtime failed running", "Reshape"),
        make=_onnx_file("m.onnx", [1, 3, 32, 32], props={"input_size": "32"}, fail_at_run_time=True),
    ),
    # -- the machine's state
    Case(
        "disk-full",
        "dcd-export",
        ("{a}/m035.pt", "-o", "{d}/old.onnx", "--input-size", str(SIZE), "--no-check", "--no-simplify"),
        ("cannot write", "old.onnx", "No space left on device"),
        make=_files(**{"old.onnx": b"previous model"}),
        env_hook="disk_full",
    ),
    Case("out-of-memory", "dcd-export", ("{a}/m035.pt", *OUT), ("out of memory",), env_hook="oom"),
    # -- round 3 (issue #21): --inputs files, an openvino that fails to import
    Case(
        "inputs-deflate-bomb",
        "dcd-validate",
        (*VALIDATE, "--inputs", "{d}/bomb.pt"),
        ("inputs file", "bomb.pt: zip member archive/data/0 inflates from", "to 2400190464 bytes", "more than 100x"),
        make=_both(
            _onnx_file("m.onnx", [1, 3, SIZE, SIZE], props={"input_size": str(SIZE)}),
            lambda d, a: inputs_bomb(d / "bomb.pt"),
        ),
    ),
    Case(
        "inputs-npy-negative-dimension",
        "dcd-validate",
        (*VALIDATE, "--inputs", "{d}/x.npy"),
        ("x.npy: its header's shape (-1, 3, 32, 32) has a negative dimension",),
        make=_both(
            _onnx_file("m.onnx", [1, 3, SIZE, SIZE], props={"input_size": str(SIZE)}),
            _npy_with_shape("x.npy", f"(-1, 3, {SIZE}, {SIZE})"),
        ),
    ),
    *[
        Case(
            f"openvino-fails-to-import-{script[4:]}",
            script,
            args,
            ("openvino is installed but fails to import", "libopenvino.so.2641", "pip install"),
            make=_onnx_file("m.onnx", ["N", 3, SIZE, SIZE], props={"input_size": str(SIZE)}),
            env_hook="broken_openvino",
            progress_before_error=script == "dcd-bench",
        )
        for script, args in (
            ("dcd-validate", (*VALIDATE, "--backend", "openvino")),
            ("dcd-export", ("mobilenetv2_035_dcd", "--mode", "fused", *OUT)),
            (
                "dcd-bench",
                (
                    "latency",
                    "--quick",
                    "--models",
                    "mobilenetv2_035",
                    "--backends",
                    "openvino",
                    "--input-size",
                    str(SIZE),
                ),
            ),
        )
    ],
]


#: click's range checks (exit 2): they fail while parsing the options, before any file is
#: opened, so they run in process (:func:`test_hostile_usage_error`); the table keeps a
#: usage error of the real script (``output-trailing-separator``).
USAGE_CASES = [
    Case(
        "input-size-10000",
        "dcd-export",
        ("mobilenetv2_035", "--input-size", "10000", "-o", "{d}/o.onnx"),
        ("--input-size", "1<=x<=1024"),
        status=2,
    ),
    Case(
        "input-size-2000",
        "dcd-export",
        ("mobilenetv2_035", "--input-size", "2000", "-o", "{d}/o.onnx"),
        ("--input-size", "1<=x<=1024"),
        status=2,
    ),
    Case(
        "batch-100000",
        "dcd-export",
        ("mobilenetv2_035", "--batch", "100000", "-o", "{d}/o.onnx"),
        ("'dynamic' (a batch of at most 1024)",),
        status=2,
    ),
    Case(
        "batch-sizes-100000",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/m.onnx", "--batch-sizes", "1,100000"),
        ("positive integers up to 1024",),
        status=2,
        make=_onnx_file("m.onnx", [1, 3, 32, 32]),
    ),
    Case(
        "validate-num-inputs-1e8",
        "dcd-validate",
        ("{a}/m035.pt", "{d}/m.onnx", "--num-inputs", "100000000"),
        ("1<=x<=10000",),
        status=2,
        make=_onnx_file("m.onnx", [1, 3, 32, 32]),
    ),
    Case(
        "seed-1e17",
        "dcd-export",
        ("mobilenetv2_035", "--seed", "100000000000000000", "-o", "{d}/o.onnx"),
        ("--seed", "0<=x<=4294967295"),
        status=2,
    ),
    Case(
        "bench-threads-1000",
        "dcd-bench",
        ("latency", "--threads", "1000", "--quick"),
        ("--threads", "1<=x<=64"),
        status=2,
    ),
]


def _snapshot(d: Path) -> dict:
    """Everything a case must not change about the files it was given."""
    snap = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        entry = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_ino, st.st_nlink)
        if p.is_symlink():
            entry += (os.readlink(p),)
        elif stat.S_ISREG(st.st_mode):
            entry += (st.st_size, p.read_bytes() if st.st_size < (1 << 24) else None)
        snap[str(p.relative_to(d))] = entry
    return snap


@pytest.fixture(scope="module")
def runs(request, assets, tmp_path_factory):
    """Run the selected cases, two at a time; maps case id -> (result, dir, snapshot) or a skip reason."""
    base = tmp_path_factory.mktemp("hostile")
    selected = {
        item.callspec.params["case"].id
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_hostile_input" and hasattr(item, "callspec")
    }
    results, hooked, forked = {}, {}, {}
    for case in CASES:
        if case.id not in selected:
            continue
        if case.root_only and not IS_ROOT:
            results[case.id] = ("skip", "creating a device node needs root")
            continue
        d = base / case.id
        (d / "cwd").mkdir(parents=True)
        (base / "tmp" / case.id).mkdir(parents=True)  # outside the snapshot: torch and ORT cache there
        if case.make:
            case.make(d, assets)
        snap = _snapshot(d)
        args = [arg.format(d=d, a=assets) for arg in case.args]
        env = {"PYTHONPATH": str(assets / case.env_hook)} if case.env_hook else {}
        env["TMPDIR"] = str(base / "tmp" / case.id)
        job = {"script": case.script, "args": args, "cwd": d / "cwd", "env": env}
        (hooked if case.env_hook else forked)[case.id] = (job, d, snap)
    # A hook is a sitecustomize, read by a new interpreter's start: those cases start the
    # script as a user does, beside the rest, forked from one interpreter that imported
    # torch once (their checks are all after the script's first line).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        futures = {
            case_id: pool.submit(run, job["script"], *job["args"], cwd=job["cwd"], env=job["env"])
            for case_id, (job, _, _) in hooked.items()
        }
        if forked:
            logs = base / "logs"
            logs.mkdir()
            done = run_scripts([job for job, _, _ in forked.values()], workdir=logs, workers=1, memory_cap=MEMORY_CAP)
            for (case_id, (_, d, snap)), result in zip(forked.items(), done, strict=True):
                results[case_id] = (result, d, snap)
        for case_id, future in futures.items():
            results[case_id] = (future.result(), *hooked[case_id][1:])
    yield results


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(runs, case: Case):
    result, d, before = runs[case.id]
    if result == "skip":
        pytest.skip(d)
    err = result.stderr
    assert result.returncode == case.status, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), err
    assert sum(ln.startswith("Error:") for ln in lines) == 1, err
    if case.status == 1 and not case.progress_before_error:
        assert len(lines) == 1, f"stderr has more than the Error line:\n{err}"
    for needle in case.needles:
        assert needle in lines[-1], f"{needle!r} not in {lines[-1]!r}"
    assert _snapshot(d) == before, "a file was created, changed or replaced"
    assert not list((d.parent / "tmp" / case.id).glob("dcd-*")), "a temporary directory was left"


def test_every_script_is_covered():
    assert {c.script for c in CASES} == {"dcd-export", "dcd-validate", "dcd-bench"}
    assert {c.status for c in CASES} == {1, 2}  # a usage error of the real script too
    assert len({c.id for c in CASES + USAGE_CASES}) == len(CASES) + len(USAGE_CASES)


@pytest.mark.parametrize("case", USAGE_CASES, ids=[c.id for c in USAGE_CASES])
def test_hostile_usage_error(tmp_path, monkeypatch, assets, case: Case):
    """The same contract as the table, through click's runner: exit 2, one last Error line."""
    from click.testing import CliRunner

    from dcd_deploy.cli import bench, export, validate

    main = {"dcd-export": export.main, "dcd-validate": validate.main, "dcd-bench": bench.main}[case.script]
    d = tmp_path / "case"
    (d / "cwd").mkdir(parents=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if case.make:
        case.make(d, assets)
    before = _snapshot(d)
    monkeypatch.chdir(d / "cwd")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)
    result = CliRunner().invoke(main, [arg.format(d=d, a=assets) for arg in case.args])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == case.status == 2, result.output
    err = result.stderr
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), err
    assert sum(ln.startswith("Error:") for ln in lines) == 1, err
    for needle in case.needles:
        assert needle in lines[-1], f"{needle!r} not in {lines[-1]!r}"
    assert _snapshot(d) == before, "a file was created, changed or replaced"
    assert not list(tmp.glob("dcd-*")), "a temporary directory was left"


# -- outputs that are written: through a symlink, keeping the mode, never over the input --


def test_symlink_output_is_written_through_and_keeps_its_mode(assets, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    target = real / "model.onnx"
    target.write_bytes(b"previous model")
    target.chmod(0o600)
    link = tmp_path / "model.onnx"
    link.symlink_to(target)
    result = run(
        "dcd-export", assets / "m035.pt", "-o", link, "--input-size", SIZE, "--no-check", "--no-simplify", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != b"previous model" and target.stat().st_size > 1000
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.iterdir()) == ["model.onnx"]


def test_default_output_is_never_the_input(assets, tmp_path):
    """``dcd-export ckpt.onnx`` (a checkpoint with an .onnx name) must not write over itself."""
    ckpt = tmp_path / "ckpt.onnx"
    ckpt.write_bytes((assets / "m035.pt").read_bytes())
    result = run("dcd-export", "ckpt.onnx", "--input-size", SIZE, "--no-check", "--no-simplify", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ckpt.read_bytes() == (assets / "m035.pt").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.deploy.onnx", "ckpt.onnx"]


# -- termination: the same clean-up as Ctrl-C ------------------------------------------------


def _stop_at(where: str, hook_dir: Path, *, module: str, name: str, after: bool) -> dict:
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(WAIT_HOOK.format(where=where, module=module, name=name, after=after))
    return {"PYTHONPATH": str(hook_dir), "DCD_TEST_MARKER": str(hook_dir / "reached")}


def _signal_when_reached(args: list, env: dict, sig: int, cwd: Path) -> subprocess.CompletedProcess:
    marker = Path(env["DCD_TEST_MARKER"])
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        preexec_fn=cap_memory,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), f"the hook was not reached: {proc.communicate()[1] if proc.poll() is not None else ''}"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_export_signal_during_parity_check_leaves_the_old_file(assets, tmp_path, sig):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"previous model")
    env = _stop_at("the parity check", tmp_path / "hook", module="dcd_deploy.parity", name="check_parity", after=False)
    result = _signal_when_reached(
        [
            str(BIN / "dcd-export"),
            str(assets / "m035.pt"),
            "-o",
            str(out / "model.onnx"),
            "--input-size",
            str(SIZE),
            "--no-simplify",
        ],
        env,
        sig,
        tmp_path,
    )
    assert result.returncode == 128 + sig, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: stopped by {signal.Signals(sig).name}; temporary files removed, nothing written"
    )
    assert sorted(p.name for p in out.iterdir()) == ["model.onnx"]
    assert (out / "model.onnx").read_bytes() == b"previous model"


def test_validate_sigterm_exits_cleanly(assets, tmp_path):
    onnx_path = tmp_path / "m.onnx"
    export_onnx(create_model("mobilenetv2_035"), onnx_path, input_size=SIZE, check=False, simplify=False)
    env = _stop_at("the parity check", tmp_path / "hook", module="dcd_deploy.parity", name="check_parity", after=False)
    result = _signal_when_reached(
        [str(BIN / "dcd-validate"), str(assets / "m035.pt"), str(onnx_path), "--json", str(tmp_path / "r.json")],
        env,
        signal.SIGTERM,
        tmp_path,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: stopped by SIGTERM")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook", "m.onnx"]


def test_bench_sigterm_removes_its_temporary_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _stop_at("the first export", tmp_path / "hook", module="dcd_deploy.exporters", name="export_onnx", after=True)
    env["TMPDIR"] = str(tmp)
    result = _signal_when_reached(
        [
            str(BIN / "dcd-bench"),
            "latency",
            "--quick",
            "--models",
            "mobilenetv2_035",
            "--backends",
            "onnxruntime",
            "--input-size",
            "32",
            "--seed",
            "1",
        ],
        env,
        signal.SIGTERM,
        tmp_path,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: stopped by SIGTERM")
    assert "[export] mobilenetv2_035" not in result.stderr  # stopped inside the temporary directory's life
    assert list(tmp.glob("dcd-bench-*")) == []  # (torch and ORT keep their own caches there)


# -- the same guarantees through the Python API ------------------------------------------------


def test_disk_full_while_exporting_keeps_the_old_file(tmp_path, monkeypatch):
    import onnx

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    path = tmp_path / "m.onnx"
    path.write_bytes(b"previous model")
    monkeypatch.setattr(onnx, "save", full)
    with pytest.raises(ExportError, match="No space left on device"):
        export_onnx(create_model("mobilenetv2_035"), path, input_size=SIZE, check=False, simplify=False)
    assert path.read_bytes() == b"previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_export_to_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ExportError, match="is a FIFO"):
        export_onnx(create_model("mobilenetv2_035"), fifo, input_size=SIZE, check=False)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_atomic_output_keeps_mode_and_writes_through_links(tmp_path):
    from dcd_deploy._atomic import atomic_output

    target = tmp_path / "t.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "l.json"
    link.symlink_to(target.name)
    with atomic_output(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.json", "t.json"]


def test_check_distinct_sees_through_spellings(tmp_path, monkeypatch):
    from dcd_deploy._atomic import check_distinct

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.pt").write_bytes(b"x")
    with pytest.raises(DCDDeployError, match="same file as the input"):
        check_distinct(outputs=[f"../{tmp_path.name}/./a.pt"], inputs=["a.pt"])
    with pytest.raises(DCDDeployError, match="same file as the output"):
        check_distinct(outputs=["new.onnx", str(tmp_path / "new.onnx")])
    check_distinct(outputs=["new.onnx", "new.json", None], inputs=["a.pt", "mobilenetv2_035"])


@pytest.mark.parametrize(
    "data, message",
    [
        (_deep_tuple_key(101), "more than 100 levels deep"),
        (_bytearray_bomb(), "far larger than the file"),
        (b"\x80\x02]q\x00(K\x01K\x02e", "damaged or truncated"),  # no STOP
        (b"\x80\x02\x8e" + (4 << 30).to_bytes(8, "little"), "damaged or truncated"),  # BYTES8 of 4 GiB, absent
    ],
)
def test_scan_pickle_refuses_without_building(tmp_path, data, message):
    from dcd_deploy._safe_pickle import scan_pickle
    from dcd_deploy.errors import CheckpointError

    path = tmp_path / "x.pkl"
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=message):
        scan_pickle(path, file_size=len(data))


def test_scan_pickle_accepts_real_checkpoints(assets, tmp_path):
    import pickle

    from dcd_deploy._safe_pickle import scan_pickle

    # wide is not deep: protocol 0 adds items one APPEND / SETITEM at a time
    wide = {"xs": list(range(500)), "d": {str(i): [i] for i in range(500)}}
    for protocol in (0, 2):
        data = pickle.dumps(wide, protocol=protocol)
        (tmp_path / "wide.pkl").write_bytes(data)
        scan_pickle(tmp_path / "wide.pkl", file_size=len(data))

    with zipfile.ZipFile(assets / "m035.pt") as zf:
        name = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        scan_pickle(assets / "m035.pt", file_size=(assets / "m035.pt").stat().st_size, member=zf.read(name))
    legacy = tmp_path / "legacy.pt"
    torch.save(create_model("mobilenetv2_035").state_dict(), legacy, _use_new_zipfile_serialization=False)
    scan_pickle(legacy, file_size=legacy.stat().st_size, count=5)


# -- more of the same, in process (the table above covers each mechanism through the scripts) --


def _invoke(main, args: list[str]):
    from click.testing import CliRunner

    result = CliRunner().invoke(main, [str(a) for a in args])
    assert isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr.strip().splitlines()[-1]


def test_more_outputs_that_are_inputs_or_each_other(tmp_path):
    from dcd_deploy.cli import bench, validate

    onnx_path = tmp_path / "m.onnx"
    _onnx(onnx_path, [1, 3, SIZE, SIZE])
    code, line = _invoke(validate.main, ["mobilenetv2_035", onnx_path, "--json", onnx_path])
    assert code == 1 and "is the same file as the input" in line
    code, line = _invoke(
        bench.main, ["latency", "--quick", "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.json"]
    )
    assert code == 1 and "is the same file as the output" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_more_bench_limits(tmp_path):
    from dcd_deploy.cli import bench

    code, line = _invoke(bench.main, ["latency", "--batch", "100000", "--quick"])
    assert code == 2 and "1<=x<=1024" in line
    code, line = _invoke(bench.main, ["latency", "--input-size", "1024", "--batch", "1024", "--quick"])
    assert code == 1 and "GiB of memory" in line


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"w": torch.zeros(3, dtype=torch.long)}, "entry w is a int64 tensor"),
        ({"w": torch.zeros(4).as_strided((3, 2), (1, 1))}, "over a storage of only 16 bytes"),
        (_ours({"num_classes": "1000"}), "config num_classes='1000' is not an integer"),
        (_ours({"dropout": 2.0}), "config dropout=2.0 is not a number in [0, 1]"),
        (_ours({1: 2}), "config key 1 is not a knob name"),
    ],
    ids=["integer", "overlapping", "classes-string", "dropout-2", "int-key"],
)
def test_more_implausible_checkpoints(tmp_path, obj, message):
    from dcd_deploy import load_checkpoint
    from dcd_deploy.errors import CheckpointError

    path = tmp_path / "c.pt"
    torch.save(obj, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, arch="mobilenetv2_035")
    assert message in str(info.value)


def test_zip_members_may_not_inflate_far_beyond_the_file(tmp_path):
    """Each member at a plausible 50x, but together far more than the file holds."""
    from dcd_deploy import load_checkpoint
    from dcd_deploy.errors import CheckpointError

    path = tmp_path / "many.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        for i in range(4):
            zf.writestr(f"archive/data/{i}", os.urandom(20_000) + bytes(1_000_000))
    with pytest.raises(CheckpointError, match="more than 4x the file"):
        load_checkpoint(path, arch="mobilenetv2_035")


# -- round 3 (issue #21): more of the same in process ------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: torch.zeros(3, 3).to_sparse(), "holds a sparse_coo tensor"),
        (
            lambda: torch.zeros(1, 3, SIZE, SIZE).to_sparse_csr() if False else torch.zeros(2, 3).to_sparse_csr(),
            "holds a sparse_csr tensor",
        ),
        (lambda: torch.zeros(1, 3, SIZE, SIZE, device="meta"), "holds a tensor on device meta"),
    ],
    ids=["sparse-coo", "sparse-csr", "meta"],
)
def test_inputs_that_are_not_dense_tensors(tmp_path, make, message):
    from dcd_deploy.inputs import load_inputs

    torch.save(make(), tmp_path / "x.pt")
    with pytest.raises(DCDDeployError, match=message):
        load_inputs(tmp_path / "x.pt")


def test_inputs_bomb_is_refused_by_the_api_before_inflating(tmp_path):
    from dcd_deploy.inputs import load_inputs

    inputs_bomb(tmp_path / "bomb.pt")
    assert (tmp_path / "bomb.pt").stat().st_size < 3 << 20
    with pytest.raises(DCDDeployError, match="inflates from .* to 2400190464 bytes"):
        load_inputs(tmp_path / "bomb.pt")
    # the same construction, 1 MiB of zeros, is a valid input file: the refusal is the size
    inputs_bomb(tmp_path / "small.pt", n_chunks=1)
    assert load_inputs(tmp_path / "small.pt").shape == (4, 3, 64, 64)


def test_legacy_pickled_inputs_are_scanned_too(tmp_path):
    from dcd_deploy.inputs import load_inputs

    torch.save(torch.ones(1, 3, 8, 8), tmp_path / "ok.pt", _use_new_zipfile_serialization=False)
    assert load_inputs(tmp_path / "ok.pt").shape == (1, 3, 8, 8)
    (tmp_path / "deep.pt").write_bytes(_deep_tuple_key(1_000_000))
    with pytest.raises(DCDDeployError, match="inputs file .*deep.pt is not a plausible checkpoint.*100 levels deep"):
        load_inputs(tmp_path / "deep.pt")


@pytest.mark.parametrize(
    "header, message",
    [
        ("(1, 3, 32, -32)", "has a negative dimension"),
        ("(99999999999999999999, 3, 32, 32)", "at most 67108864 are checked"),
        ("(4, 3, 32, 32)", "is truncated"),
    ],
)
def test_npy_headers_that_lie(tmp_path, header, message):
    from dcd_deploy.inputs import load_inputs

    _npy_with_shape("x.npy", header)(tmp_path, tmp_path)
    with pytest.raises(DCDDeployError, match=message):
        load_inputs(tmp_path / "x.npy")


def test_a_250_character_output_name_works(tmp_path, monkeypatch):
    from dcd_deploy.cli import export

    monkeypatch.chdir(tmp_path)
    name = "m" * 245 + ".onnx"
    code, _ = _invoke_ok(export.main, ["mobilenetv2_035", "-o", name, "--input-size", SIZE, "--no-simplify"])
    assert code == 0
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_non_utf8_output_name_works(tmp_path):
    """onnx.checker takes only UTF-8 paths: the temporary file's name is plain ASCII (a real
    run: click's runner cannot print such a name)."""
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        [
            str(BIN / "dcd-export"),
            "mobilenetv2_035",
            "-o",
            b"\xff\xfe-model.onnx",
            "--input-size",
            str(SIZE),
            "--no-simplify",
            "--json",
            b"\xfa.json",
        ],
        cwd=out,
        capture_output=True,
        timeout=TIMEOUT,
        preexec_fn=cap_memory,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert sorted(os.listdir(os.fsencode(out))) == [b"\xfa.json", b"\xff\xfe-model.onnx"]


def _invoke_ok(main, args):
    from click.testing import CliRunner

    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.exit_code, result.output


def test_temporary_names_are_short_and_plain(tmp_path):
    from dcd_deploy._atomic import temporary_name

    for name in ("m" * 250, "\udcff\udcfe.onnx", "a b\u00e9.onnx", "...", ""):
        tmp = temporary_name(tmp_path / (name or "x"))
        assert tmp.parent == tmp_path and tmp.name.isascii() and len(tmp.name) <= 60
        assert tmp.name.startswith(".") and tmp.name.endswith(".tmp")


def test_warnings_show_after_success_and_never_before_an_error(capsys):
    import warnings

    import click

    import dcd_deploy.cli._run
    from dcd_deploy.cli._run import run_cli

    @run_cli
    def fails():
        warnings.warn("numpy said something", RuntimeWarning, stacklevel=1)
        raise DCDDeployError("the reason")

    @run_cli
    def works():
        warnings.warn("torch said something", UserWarning, stacklevel=1)
        click.echo("done")

    with pytest.raises(SystemExit) as exit_:
        fails()
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == ["Error: the reason"]
    with pytest.warns(UserWarning, match="torch said something"):
        works()

    @run_cli
    def ours():  # a warning of this package's own is told as one line, without its file and line
        warnings.warn_explicit("the toolkit said something", UserWarning, click.__file__.replace("click", "x"), 1)
        warnings.warn_explicit("the toolkit said something", UserWarning, dcd_deploy.cli._run.__file__, 1)
        click.echo("done")

    with pytest.warns(UserWarning, match="the toolkit said something"):  # the first: not ours
        ours()
    assert capsys.readouterr().err.strip().splitlines() == ["Warning: the toolkit said something"]


def test_an_error_line_is_capped(capsys):
    from dcd_deploy.cli._run import MAX_ERROR_LINE, run_cli

    @run_cli
    def fails():
        raise DCDDeployError("x" * (1 << 20))

    with pytest.raises(SystemExit):
        fails()
    line = capsys.readouterr().err.strip()
    assert line.startswith("Error: xxx") and line.endswith("...") and len(line) == len("Error: ") + MAX_ERROR_LINE


def test_sigterm_ends_an_endless_onnxruntime_inference(tmp_path):
    """A Loop of 10^15 iterations: ONNX Runtime never returns to Python, where signal
    handlers run; the watchdog cleans up and exits within its grace period."""
    result = sigterm_inside_inference(tmp_path, "onnxruntime")
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: stopped by SIGTERM; temporary files removed, nothing written"
    )
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook", "inside", "loop.onnx"]


def test_an_abrupt_exit_removes_the_registered_temporaries(tmp_path):
    """What the watchdog runs before exiting: registered files and folders go, process
    groups are killed."""
    from dcd_deploy import _cleanup
    from dcd_deploy._atomic import atomic_output

    with atomic_output(tmp_path / "out.onnx") as tmp:  # registers its temporary file
        assert str(tmp) in _cleanup._paths
    assert str(tmp) not in _cleanup._paths
    proc = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    _cleanup.register_group(proc.pid)
    folder, half = tmp_path / "dcd-bench-x", tmp_path / ".out.onnx.0123abcd.tmp"
    (folder / "sub").mkdir(parents=True)
    half.write_bytes(b"half")
    try:
        _cleanup.register_path(folder)
        _cleanup.register_path(half)
        _cleanup.emergency_cleanup()
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        _cleanup.unregister_group(proc.pid)
        _cleanup.unregister_path(folder)
        _cleanup.unregister_path(half)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]
