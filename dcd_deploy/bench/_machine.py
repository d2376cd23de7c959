"""The machine a benchmark ran on: the header of every latency report.

A latency means little without the CPU, the library versions, the thread settings and
the load when it was taken; :func:`machine_info` gathers them into a
:class:`MachineInfo` before any timing, so a report can be compared with another run's
(or told apart from it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MachineInfo:
    """Where and how the numbers were taken (the header of every report)."""

    cpu: str
    cores: int
    cpus_usable: int
    platform: str
    python: str
    torch: str
    onnxruntime: str | None
    openvino: str | None
    dcd_deploy: str
    threads: int
    torch_interop_threads: int
    batch: int
    input_size: int | list[int]  # a side, or [H, W] when not square
    date: str
    load_avg: list[float] | None  # 1, 5, 15 min load averages when the benchmark started
    channels: int = 3  # the input's channels (a user's grey or RGB-D network: --channels)
    inputs: str | None = None  # given inputs (--inputs): each one's name and shape, else None


def cpu_model(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The CPU's model name (first ``model name`` of ``/proc/cpuinfo``, else the platform's)."""
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Processor") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
    except Exception:  # a broken install is reported as missing
        return None
    return str(getattr(mod, "__version__", None) or getattr(mod, "get_version", lambda: "?")())


def machine_info(
    *, threads: int, batch: int, input_size: int, with_openvino: bool = False, channels: int = 3, inputs=None
) -> MachineInfo:
    import torch

    from .._version import __version__

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return MachineInfo(
        cpu=cpu_model(),
        cores=os.cpu_count() or 1,
        cpus_usable=usable,
        platform=platform.platform(),
        python=platform.python_version(),
        torch=torch.__version__,
        onnxruntime=_version("onnxruntime"),
        openvino=_version("openvino") if with_openvino else None,
        dcd_deploy=__version__,
        threads=threads,
        torch_interop_threads=torch.get_num_interop_threads(),
        batch=batch,
        input_size=input_size,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        load_avg=_load_avg(),
        channels=channels,
        inputs=inputs,
    )


def _load_avg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None
