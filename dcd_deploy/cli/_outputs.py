"""Where a command writes: output paths checked before any work, reports written atomically.

No command leaves half a file (:mod:`dcd_deploy._atomic`), writes over one of its inputs,
or writes two outputs to the same file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from .._atomic import atomic_output, check_distinct, check_output_path
from ..errors import DCDDeployError


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (see :mod:`dcd_deploy._atomic`).

    Raises:
        DCDDeployError: the file cannot be written (missing directory, permissions).
    """
    with atomic_output(path) as tmp:
        try:
            try:
                text = json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:  # a file name that is not UTF-8: \udcxx escapes
                text = json.dumps(data, indent=2, ensure_ascii=True).encode("ascii")
            with open(tmp, "wb") as fh:
                fh.write(text + b"\n")
        except OSError as exc:
            raise DCDDeployError(f"cannot write {path}: {exc.strerror or exc}") from None


def check_output_dir(path: Path | None) -> None:
    """Refuse an unwritable output path early (before loading or exporting anything)."""
    if path is not None:
        check_output_path(path)


def check_outputs(*, outputs, inputs=()) -> None:
    """Refuse, before any work, outputs that cannot be written or would overwrite an input.

    Args:
        outputs: the command's output paths (None for one not asked for).
        inputs: the files it reads (names that are not files, like zoo names, are skipped).

    Raises:
        DCDDeployError: an output is a directory, FIFO, device, ends in a separator, is an
            input, or two outputs are the same file.
    """
    for path in outputs:
        check_output_dir(path)
    check_distinct(outputs=outputs, inputs=inputs)


def default_output(model: str, suffix: str = ".onnx") -> Path:
    """MODEL's name with ``suffix`` in the current directory, never MODEL itself.

    ``dcd-export ckpt.onnx`` would otherwise write over its own input.
    """
    name = Path(model).name.split(".")[0] or "model"
    out = Path(name + suffix)
    if out.exists() and os.path.exists(model) and os.path.samefile(out, model):
        out = Path(f"{name}.deploy{suffix}")
    return out


class OutputPath(click.ParamType):
    """A file path kept as typed: ``newdir/`` must not lose its separator and become a file.

    Args:
        allow_dash: ``-`` is accepted (and kept as ``Path("-")``): the caller writes to stdout.
    """

    name = "path"

    def __init__(self, allow_dash: bool = False):
        self.allow_dash = allow_dash

    def convert(self, value, param, ctx):
        if isinstance(value, Path):
            return value
        if not value:
            self.fail("empty path", param, ctx)
        if value == "-" and not self.allow_dash:
            self.fail("'-' (stdout) is not accepted here; name a file", param, ctx)
        if value.endswith(os.sep):
            self.fail(f"{value} ends in a path separator; name a file, not a directory", param, ctx)
        return Path(value)
