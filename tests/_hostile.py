"""Hostile files and runs shared by the hostile-input tests (issue #21).

Imported as ``_hostile`` (see ``_zoo``): an ``--inputs`` deflate bomb built in a
fraction of a second, an image model that loops 10^15 times, and a run of
``dcd-validate`` that gets SIGTERM while the runtime is inside that loop.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import struct
import subprocess
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import onnx
import torch
from _cli import BIN, TIMEOUT
from onnx import TensorProto, helper, numpy_helper

SIZE = 32
MEMORY_CAP = 4 << 30  # the cap: every case must end cleanly under it


def cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


# -- a .pt of 2.4e9 deflated zeros, written without deflating them -----------------------------


def _affine_of_chunk(chunk: bytes):
    """crc32(chunk, c) is affine in c over GF(2): (images of the 32 unit vectors, constant)."""
    k = zlib.crc32(chunk, 0)
    return [zlib.crc32(chunk, 1 << i) ^ k for i in range(32)], k


def _apply(m, v: int) -> int:
    cols, k = m
    for i in range(32):
        if v >> i & 1:
            k ^= cols[i]
    return k


def _compose(a, b):  # a after b
    k = _apply(a, b[1])
    cols = [_apply(a, c) ^ a[1] for c in b[0]]
    return cols, k


def crc32_of_zeros(n_chunks: int, chunk: int) -> int:
    """CRC-32 of n_chunks * chunk zero bytes, without running over them (square and multiply)."""
    step = _affine_of_chunk(bytes(chunk))
    result = ([1 << i for i in range(32)], 0)  # identity
    while n_chunks:
        if n_chunks & 1:
            result = _compose(step, result)
        step = _compose(step, step)
        n_chunks >>= 1
    return result[1]


def deflated_zeros(n_chunks: int, chunk: int = 1 << 20) -> bytes:
    """A raw deflate stream of n_chunks * chunk zeros: after a full flush, every chunk of
    zeros compresses to the same bytes, so one compressed chunk is repeated."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = co.compress(bytes(chunk)) + co.flush(zlib.Z_FULL_FLUSH)
    again = co.compress(bytes(chunk)) + co.flush(zlib.Z_FULL_FLUSH)
    return first + again * (n_chunks - 1) + co.flush()


def write_zip(path, members) -> None:
    """members: (name, method, stored bytes, crc, uncompressed size); sizes below 4 GiB."""
    out, central = io.BytesIO(), []
    for name, method, data, crc, size in members:
        offset = out.tell()
        n = name.encode()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size, len(n), 0))
        out.write(n)
        out.write(data)
        central.append(
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                method,
                0,
                0x21,
                crc,
                len(data),
                size,
                len(n),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + n
        )
    start = out.tell()
    for c in central:
        out.write(c)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), out.tell() - start, start, 0))
    with open(path, "wb") as fh:
        fh.write(out.getvalue())


def inputs_bomb(path, n_chunks: int = 2289) -> None:
    """A .pt of one 4x3x64x64 view of a storage of n_chunks MiB of deflated zeros (2.4e9 bytes)."""
    marker = 123457
    buf = io.BytesIO()
    torch.save(torch.zeros(marker)[: 4 * 3 * 64 * 64].view(4, 3, 64, 64), buf)
    members = []
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            if info.filename.endswith("/data/0"):
                size = n_chunks << 20
                members.append((info.filename, 8, deflated_zeros(n_chunks), crc32_of_zeros(n_chunks, 1 << 20), size))
                continue
            if info.filename.endswith("data.pkl"):
                old = b"J" + struct.pack("<i", marker)
                assert data.count(old) == 1
                data = data.replace(old, b"J" + struct.pack("<i", (n_chunks << 20) // 4))
            members.append((info.filename, 0, data, zlib.crc32(data), len(data)))
    write_zip(path, members)


def loop_model(path: Path, trips: int = 10**15) -> None:
    """An image model whose graph is a Loop of ``trips`` iterations (forever, in practice)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None),
        ],
    )
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"), numpy_helper.from_array(np.array(True), "c")]
    nodes = [
        helper.make_node("Loop", ["M", "c", "x"], ["v"], body=body),
        helper.make_node("ReduceMean", ["v"], ["y"], axes=[2, 3], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, {"input_size": str(SIZE)})
    onnx.save(model, path)


# Announces (a marker file) that the runtime's inference is starting.
INFER_HOOK = """\
import os
import {module} as _m
_real = _m.{cls}.{method}
def _announce(self, *args, **kwargs):
    open(os.environ["DCD_TEST_MARKER"], "w").close()
    return _real(self, *args, **kwargs)
_m.{cls}.{method} = _announce
"""


def sigterm_inside_inference(tmp_path: Path, backend: str) -> subprocess.CompletedProcess:
    """dcd-validate on a Loop of 10^15 iterations, SIGTERM once the runtime is inside it."""
    path = tmp_path / "loop.onnx"
    loop_model(path)
    hook = tmp_path / "hook"
    hook.mkdir()
    module, cls, method = (
        ("onnxruntime", "InferenceSession", "run")
        if backend == "onnxruntime"
        else ("openvino", "InferRequest", "infer")
    )
    (hook / "sitecustomize.py").write_text(INFER_HOOK.format(module=module, cls=cls, method=method))
    marker = tmp_path / "inside"
    env = {**os.environ, "PYTHONPATH": str(hook), "DCD_TEST_MARKER": str(marker), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            str(BIN / "dcd-validate"),
            "mobilenetv2_035",
            str(path),
            "--backend",
            backend,
            "--batch-sizes",
            "1",
            "--json",
            str(tmp_path / "r.json"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=cap_memory,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate()[1] if proc.poll() is not None else "never reached"
        time.sleep(0.5)  # inside the native call
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
