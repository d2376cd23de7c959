"""``python -m dcd_deploy export|validate|bench ...``: the three commands under one entry point.

Each subcommand is the console script of the same name (``dcd-export`` and so on) with
its own options and ``--help``. A command's module is imported only when it is run, so
the usage line prints without loading PyTorch.
"""

from __future__ import annotations

import importlib
import sys

from ._version import __version__

#: Subcommand -> module whose click command ``main`` runs it.
COMMANDS = {"export": "dcd_deploy.cli.export", "validate": "dcd_deploy.cli.validate", "bench": "dcd_deploy.cli.bench"}
PROG = "python -m dcd_deploy"
USAGE = f"usage: {PROG} {{{','.join(COMMANDS)}}} [ARGS]...  (each command takes --help)"

_HELP = f"""{USAGE}

  export    MODEL -> ONNX in deploy form, parity-checked (dcd-export)
  validate  the parity report of MODEL against an ONNX file (dcd-validate)
  bench     latency | frontier | floor | complexity | summary (dcd-bench)

options:
  -h, --help  show this message and exit
  --version   show the version and exit"""


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand named by ``argv[0]``; returns the exit status of a bad call.

    A subcommand exits through click (``SystemExit``) with its own status.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in ("-h", "--help"):
        print(_HELP)
        return 0
    if args and args[0] == "--version":
        print(f"{PROG}, version {__version__}")
        return 0
    if not args or args[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        if args:
            print(f"error: unknown command {args[0]!r}", file=sys.stderr)
        return 2  # click's status for a usage error
    command = importlib.import_module(COMMANDS[args[0]]).main
    return command.main(args=args[1:], prog_name=f"{PROG} {args[0]}")


if __name__ == "__main__":
    from .cli import run_and_exit

    run_and_exit(main)
