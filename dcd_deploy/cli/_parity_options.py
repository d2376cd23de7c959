"""The options of the commands that run a parity check (``dcd-export``, ``dcd-validate``):
the images (``--inputs``, the preprocessing options), ``--accept-inconclusive``, the
memory budget, and the error a failed check ends with.
"""

from __future__ import annotations

import click

from .._limits import check_memory
from ..errors import DCDDeployError, ParityError
from ._model_arg import file_option


def parity_failure(report, *, file_of_its_own: bool = False) -> ParityError:
    """The error for a failed or inconclusive check; it names ``--inputs`` where the inputs
    were to blame, and, for a file checked against a model it need not come from
    (``file_of_its_own``: dcd-validate), other weights where every layer is off."""
    if report.verdict == "INCONCLUSIVE":
        return ParityError(f"parity check inconclusive: {report.summary()}", report)
    message = f"parity check failed: {report.summary()}"
    if file_of_its_own and report.other_weights_likely:
        message += (
            "; every layer is off, the first included: most likely the file holds other weights than "
            "this model's (exported from another checkpoint, or from a model left at its random initialisation)"
        )
    if report.ill_conditioned and report.synthetic_inputs and report.first_failing_layer is None:
        message += (
            "; the built-in synthetic images are outside this model's working range: "
            "give its preprocessing (--preprocess, --mean/--std/--scale, --bgr) or check on your own "
            "images with --inputs FILE (.npy or .pt, N x 3 x H x W)"
        )
    return ParityError(message, report)


def inputs_option(fn):
    """``--inputs FILE``: the parity check's images instead of the synthetic ones."""
    return file_option(
        "--inputs",
        "inputs_path",
        help="Check parity on these images: a .npy or .pt tensor, N x C x H x W or N x H x W x C "
        "(C = 3, or the model's channels; one image may leave N out); floating-point values are taken as preprocessed, "
        "uint8 RGB pixels go through --preprocess (default: built-in synthetic images). "
        "A model of several inputs (or of one that is no image): a .npz, or a .pt dict, list or "
        "tuple, one array per forward argument (by name, else in order), axis 0 the batch, taken "
        "as the model takes them; dcd-export traces with the first sample of each.",
    )(fn)


def preprocess_options(fn):
    """``--preprocess``, ``--mean``, ``--std``, ``--scale``, ``--bgr``: how the model's images
    are made from pixels (for the built-in images and uint8 ``--inputs``)."""
    from ..preprocess import PRESETS

    fn = click.option(
        "--bgr", is_flag=True, default=None, help="The model takes BGR images (overrides the preset's channel order)."
    )(fn)
    fn = click.option(
        "--scale",
        type=click.FloatRange(min=0, min_open=True, max=1e6),
        default=None,
        help="What a full-intensity pixel is worth before mean and std: 1 for [0, 1], 255 for "
        "[0, 255] (overrides the preset's).",
    )(fn)
    fn = click.option(
        "--std",
        type=_Floats(),
        default=None,
        metavar="S,S,S",
        help="Per-channel std in the model's channel order and pixel units (overrides the preset's).",
    )(fn)
    fn = click.option(
        "--mean",
        type=_Floats(),
        default=None,
        metavar="M,M,M",
        help="Per-channel mean in the model's channel order and pixel units (overrides the preset's).",
    )(fn)
    fn = click.option(
        "--preprocess",
        "preset",
        type=click.Choice(list(PRESETS)),
        default=None,
        help="The model's input preprocessing, applied to the built-in images and to uint8 "
        "--inputs: imagenet (default: [0, 1] RGB normalised with ImageNet's mean and "
        "std), unit ([0, 1]), 0-255, inception ([-1, 1]), bgr-imagenet, caffe; uint8: the "
        "model takes uint8 pixels as they are and normalises them itself (dcd-export then "
        "writes a uint8 input).",
    )(fn)
    return fn


class _Floats(click.ParamType):
    """``0.5,0.5,0.5``: comma-separated finite numbers."""

    name = "floats"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            floats = tuple(float(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"expected comma-separated numbers, e.g. 0.485,0.456,0.406; got {value!r}", param, ctx)
        if not all(abs(v) < 1e6 for v in floats):
            self.fail("expected finite numbers below 1e6", param, ctx)
        return floats


def make_preprocess_from_options(preset, mean, std, scale, bgr, *, channels: int = 3):
    """The :class:`~dcd_deploy.preprocess.Preprocess` the options describe (one line on a bad
    one, or on any for a model of other than 3 ``channels``: :func:`check_preprocess_channels`)."""
    from ..preprocess import make_preprocess

    check_preprocess_channels(channels, preset, mean, std, scale, bgr)

    try:
        return make_preprocess(preset, mean=mean, std=std, scale=scale, bgr=bgr)
    except DCDDeployError as exc:
        raise click.UsageError(str(exc)) from None


def check_preprocess_channels(channels: int, preset, mean, std, scale, bgr) -> None:
    """Refuse the preprocessing options for a model of other than 3 input channels: the
    presets describe RGB images, and such a model's check takes preprocessed inputs. A
    grey model of uint8 pixels (``--channels 1 --preprocess uint8``) is checked on the
    built-in images as grey pixels."""
    if channels == 1 and preset == "uint8" and (mean, std, scale, bgr) == (None,) * 4:
        return
    given = [
        name
        for name, v in zip(("--preprocess", "--mean", "--std", "--scale", "--bgr"), (preset, mean, std, scale, bgr))
        if v is not None
    ]
    if channels != 3 and given:
        raise click.UsageError(
            f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} RGB images; a {channels}-channel "
            "model is checked on preprocessed float --inputs or on seeded samples"
            + (" (a grey model of uint8 pixels: --preprocess uint8 alone)" if channels == 1 else "")
        )


def accept_inconclusive_option(fn):
    """``--accept-inconclusive``: an end-to-end check without power may pass."""
    return click.option(
        "--accept-inconclusive",
        is_flag=True,
        help="Pass even when the end-to-end comparison is inconclusive (PyTorch fp32 itself "
        "far off float64 on these inputs) and no dynamic layer could decide it layer "
        "by layer. Without it that is not a PASS (exit 1).",
    )(fn)


def check_parity_budget(*, input_size: int, batch_sizes, n_inputs: int) -> None:
    """Refuse a parity check too big for memory (see :mod:`dcd_deploy._limits`)."""
    biggest = max(batch_sizes)
    total = max(-(-n_inputs // b) * b for b in batch_sizes)
    check_memory(input_size=input_size, batch=biggest, n_inputs=total, what="the parity check")
