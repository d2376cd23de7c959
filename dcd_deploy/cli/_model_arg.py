"""The MODEL argument on the command line: a checkpoint, a zoo name or ``MODULE:FUNCTION``.

What the commands need to know about it besides the model itself
(:func:`dcd_deploy.checkpoint.resolve_model` builds that): the files it reads (so no
output overwrites them), a name for the default output file and a label for the report.
"""

from __future__ import annotations

from pathlib import Path

import click

from .._factory_spec import parse_factory_spec
from .._limits import MAX_SEED

#: How MODEL is described in every command's --help.
MODEL_HELP = (
    "MODEL is a checkpoint path, a zoo name (dcd-bench --list-models) or MODULE:FUNCTION: a Python "
    "file (mynet.py) or importable module (pkg.nets) and the function that returns your nn.Module "
    "(mynet.py:build; arguments as Python literals: 'mynet.py:build(num_classes=10)'), with --weights "
    "FILE for its state dict. MODULE:FUNCTION imports and runs "
    "that code (your own, because you named it); checkpoints never run code."
)


def resolve_model(*args, **kwargs):
    """:func:`dcd_deploy.checkpoint.resolve_model`, imported when a command gets that far
    (it loads torch: ``--help``, ``--version`` and usage errors do not)."""
    from ..checkpoint import resolve_model as resolve

    return resolve(*args, **kwargs)


def file_option(*decls: str, help: str):  # noqa: A002  (click's own keyword)
    """An option naming a file the command reads (``--weights FILE``, ``--inputs FILE``)."""
    return click.option(
        *decls, type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE", help=help
    )


def weights_option(fn):
    """``--weights FILE``: a state dict for the model MODULE:FUNCTION (or a zoo name) builds."""
    return file_option(
        "--weights",
        help="State dict (or checkpoint) loaded into the model that MODULE:FUNCTION or a zoo "
        "name builds: read weights-only like any checkpoint, strictly, 'module.' "
        "prefixes dropped.",
    )(fn)


def weights_key_option(fn):
    """``--weights-key KEY``: which weights of a training checkpoint are loaded."""
    return click.option(
        "--weights-key",
        default=None,
        metavar="KEY",
        help="The entry of a checkpoint dict (MODEL's, or --weights') whose weights are loaded, e.g. "
        "state_dict_ema for timm's EMA copy (default: state_dict, model_state_dict or model, the "
        "first found; a warning names any other weights the file holds).",
    )(fn)


def model_inputs(model: str, weights: Path | None = None) -> list:
    """The files MODEL (and ``--weights``) reads: outputs must not be any of them."""
    factory = parse_factory_spec(model)
    files = [Path(factory.module)] if factory is not None and factory.is_file else [model]
    return files + ([weights] if weights is not None else [])


def output_stem(model: str) -> str:
    """What the default output is named after: the factory's file or module, else MODEL."""
    factory = parse_factory_spec(model)
    if factory is None:
        return model
    return Path(factory.module).stem if factory.is_file else factory.module.rpartition(".")[2]


def model_label(model: str, net) -> str:
    """The report's name for the model: its zoo arch, else ``mynet:build (Net)``, else its class."""
    arch = getattr(net, "arch", None)
    if isinstance(arch, str):
        return arch
    factory = parse_factory_spec(model)
    if factory is not None:
        return f"{factory.name} ({type(net).__name__})"
    return type(net).__name__


def model_options(fn):
    """The options every command that reads a MODEL argument shares."""
    fn = click.option(
        "--arch",
        default=None,
        metavar="NAME",
        help="Zoo architecture of a plain state dict (a name from the zoo; for a model of "
        "your own give MODEL as MODULE:FUNCTION with --weights).",
    )(fn)
    fn = weights_option(fn)
    fn = weights_key_option(fn)
    fn = click.option(
        "--trust-checkpoint",
        is_flag=True,
        help="Allow checkpoints that need full unpickling (runs code from the file).",
    )(fn)
    fn = click.option(
        "--seed",
        type=click.IntRange(0, MAX_SEED),
        default=0,
        show_default=True,
        help="For a zoo name: pseudo-train seed giving non-trivial weights; for "
        "MODULE:FUNCTION: the seed of torch's, numpy's and Python's generators while it builds "
        "the model (weights it leaves at their "
        "random initialisation are then the same in every command).",
    )(fn)
    return fn
