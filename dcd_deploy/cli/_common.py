"""Helpers shared by the click commands.

:func:`run_cli` gives every command the toolkit's error contract (docs/design.md#errors):
a :class:`~dcd_deploy.errors.DCDDeployError` becomes one ``Error: <message>`` line on
stderr and exit status 1, with no traceback; any other exception is a bug and
propagates with its traceback. :func:`write_json_atomic` writes a report so a reader
never sees half a file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from .._atomic import atomic_output, check_output_path
from ..errors import DCDDeployError, ParityError

#: Exit status of a command stopped by a user error.
USER_ERROR_STATUS = 1

F = TypeVar("F", bound=Callable[..., Any])


def run_cli(fn: F) -> F:
    """Turn a :class:`DCDDeployError` raised by ``fn`` into ``Error: ...`` and exit 1.

    Apply it directly above the function, under the click decorators::

        @click.command()
        @click.option(...)
        @run_cli
        def main(...): ...
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DCDDeployError as exc:
            message = " ".join(str(exc).split("\n")) or type(exc).__name__
            click.echo(f"Error: {message}", err=True)
            raise SystemExit(USER_ERROR_STATUS) from None

    return wrapper  # type: ignore[return-value]


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (see :mod:`dcd_deploy._atomic`).

    Raises:
        DCDDeployError: the file cannot be written (missing directory, permissions).
    """
    with atomic_output(path) as tmp:
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2, ensure_ascii=False)
                fh.write("\n")
        except OSError as exc:
            raise DCDDeployError(f"cannot write {path}: {exc.strerror or exc}") from None


def check_output_dir(path: Path | None) -> None:
    """Refuse an unwritable output path early (before loading or exporting anything)."""
    if path is not None:
        check_output_path(path)


def parity_failure(report) -> ParityError:
    """The error for a failed check; it names ``--inputs`` where the inputs were to blame."""
    message = f"parity check failed: {report.summary()}"
    if report.ill_conditioned and report.synthetic_inputs:
        message += ("; the built-in synthetic images are outside this model's working range: "
                    "check on your own preprocessed images with --inputs FILE (.npy or .pt, N x 3 x H x W)")
    return ParityError(message, report)


def inputs_option(fn):
    """``--inputs FILE``: the parity check's images instead of the synthetic ones."""
    return click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="FILE",
                        help="Check parity on these images: a .npy or .pt float tensor N x 3 x H x W, "
                             "preprocessed as the model expects (default: built-in synthetic images).")(fn)


def model_options(fn):
    """The options every command that reads a MODEL argument shares."""
    fn = click.option("--arch", default=None, metavar="NAME",
                      help="Architecture of a plain state dict (a name from the zoo).")(fn)
    fn = click.option("--trust-checkpoint", is_flag=True,
                      help="Allow checkpoints that need full unpickling (runs code from the file).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="For a zoo name: pseudo-train seed giving non-trivial weights.")(fn)
    return fn
