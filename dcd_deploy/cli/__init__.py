"""The command-line entry points (``dcd-export``, ``dcd-validate``, ``dcd-bench``).

:func:`run_cli` is public for the library's own small commands (``python -m
dcd_deploy.openvino._build``), which keep the same one-line error contract.
"""

from ._exit import run_and_exit
from ._run import run_cli

__all__ = ["run_and_exit", "run_cli"]
