"""The benchmark's choice of backends, from the one registry (:data:`dcd_deploy.runtimes.BACKENDS`).

Every place that names, checks, titles or explains a backend (the latency table's
sections and legend, the runner cache, the frontier's settings, the JSON) reads the
registry's :class:`~dcd_deploy.runtimes.Backend`; nothing switches on a backend's name.
A backend is a *source* of the model (``model``, ``deploy``, ``onnx``, ``fused``) run by
a *runtime* with *options* (``torch-paper``: eager PyTorch with oneDNN off).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

from ..errors import DCDDeployError
from ..runtimes import BENCH_BACKENDS as BACKENDS
from ..runtimes import FILE_BACKENDS, OPENVINO_BACKENDS, PAPER_BACKEND, Backend, backend

#: The steps of the default latency table: the paper's conditions, today's eager PyTorch
#: (oneDNN on, same deploy form), ONNX Runtime, OpenVINO with standard ops, OpenVINO with
#: the fused DCD kernels (the OpenVINO steps skipped, with a note, when it is not
#: installed). ``torch-paper`` only with one thread.
DEFAULT_BACKENDS = (PAPER_BACKEND, "torch-deploy", "onnxruntime", "openvino", "openvino-fused")


def default_backends(threads: int = 1) -> tuple[str, ...]:
    """The backends timed when none are named: with one thread the paper's conditions first."""
    return DEFAULT_BACKENDS if threads == 1 else tuple(b for b in DEFAULT_BACKENDS if b != PAPER_BACKEND)


def select_backends(
    backends: Sequence[str],
    notes: list[str],
    progress: Callable[[str], None],
    *,
    threads: int = 1,
    files: Sequence[str] = (),
) -> list[str]:
    """``backends`` checked, duplicates dropped, those whose package is missing skipped
    (with a note and a progress line).

    Raises:
        DCDDeployError: an unknown backend, a PyTorch backend for ONNX ``files``, the
            paper's backend with more than one thread, or no backend left.
    """
    out = []
    for name in backends:
        b = backend(name)
        if files and not b.runs_file:
            raise DCDDeployError(
                f"{name} times a PyTorch model, and {files[0]} is an ONNX file: time files on "
                f"{', '.join(FILE_BACKENDS)}"
            )
        if name == PAPER_BACKEND and threads != 1:
            raise DCDDeployError(
                f"{PAPER_BACKEND} is the paper's single-thread condition; run it with --threads 1, not {threads}"
            )
        if name in out:
            continue
        if b.requires and importlib.util.find_spec(b.requires) is None:
            notes.append(f"{b.requires} not installed, {name} skipped")
            progress(f"{b.requires} not installed, {name} skipped")
            continue
        out.append(name)
    if not out:
        raise DCDDeployError("no backend left to run")
    return out


def legend_lines(names: Sequence[str], indent: str = "    ") -> list[str]:
    """One ``name = legend`` line per backend."""
    return [f"{indent}{name} = {backend(name).legend}" for name in names]


__all__ = [
    "BACKENDS",
    "Backend",
    "DEFAULT_BACKENDS",
    "FILE_BACKENDS",
    "OPENVINO_BACKENDS",
    "PAPER_BACKEND",
    "backend",
    "default_backends",
    "legend_lines",
    "select_backends",
]
