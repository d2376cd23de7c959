"""Eager PyTorch: a module run as it is (the training form, or the deploy form of
:func:`~dcd_deploy.exporters.to_deploy`), with oneDNN on or off.

``onednn=False`` switches oneDNN (MKLDNN) off around each call only, so eager
convolutions run PyTorch's native kernels (im2col + GEMM, the native depthwise kernel):
the paper's condition, when PyTorch's CPU convolutions were several times slower than
today's oneDNN ones; runners of other backends interleaved with it keep oneDNN.

PyTorch's thread pools are process-wide: ``threads=None`` (the benchmark's choice, which
sets them for the whole run) leaves them as the caller set them; a number sets the
intra-op count around each call and restores it after. Inputs are passed positionally,
in the feed's order; outputs are named ``output`` (one tensor), ``output_<i>`` (a tuple
or list) or by key (a dict).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import BackendLoadError, BackendRunError
from ._base import Feed, Runner, clip


@contextlib.contextmanager
def onednn_disabled():
    """oneDNN (MKLDNN) off inside the block, restored after, even on error.

    Set through the public ``torch.backends.mkldnn.enabled`` flag:
    ``torch.backends.mkldnn.flags()`` also resets the TF32 setting and warns about it on
    every call.
    """
    import torch

    mkldnn = torch.backends.mkldnn
    was = mkldnn.enabled
    mkldnn.enabled = False
    try:
        yield
    finally:
        mkldnn.enabled = was


@contextlib.contextmanager
def torch_threads(n: int | None):
    """PyTorch's intra-op thread count set to ``n`` inside the block (None: unchanged)."""
    import torch

    if n is None:
        yield
        return
    was = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(was)


class TorchRunner(Runner):
    """A PyTorch module called eagerly.

    Args:
        source: the ``nn.Module`` (in eval mode; not copied).
        threads: PyTorch's intra-op threads around each call; None: as set by the caller.
        onednn: False runs each call with oneDNN off (:func:`onednn_disabled`).
    """

    runtime, title = "torch", "PyTorch"

    def __init__(
        self,
        source,
        *,
        threads: int | None = None,
        input_shapes=None,
        extra_outputs: Sequence[str] = (),
        onednn: bool = True,
    ):
        super().__init__(source, threads=threads, input_shapes=input_shapes, extra_outputs=extra_outputs)
        if extra_outputs:
            raise BackendLoadError(
                "eager PyTorch runs a module, which has no named intermediate tensors to "
                "return; extra outputs need an ONNX runtime"
            )
        if not callable(source):
            raise BackendLoadError(f"eager PyTorch runs a module, not {type(source).__name__}")
        self.module, self.onednn = source, bool(onednn)

    def bind(self, feed: Feed) -> Callable[[], object]:
        import torch

        module, xs = self.module, [torch.as_tensor(v) for v in feed.values()]
        if self.threads is None:  # the benchmark's case: nothing around the call but what it asks
            if self.onednn:
                return lambda: module(*xs)

            def native():
                with onednn_disabled():
                    return module(*xs)

            return native

        def run():
            with torch_threads(self.threads), contextlib.nullcontext() if self.onednn else onednn_disabled():
                return module(*xs)

        return run

    def run(self, feed: Feed, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        import torch

        call = self.bind(feed)
        try:
            with torch.inference_mode():
                result = call()
        except (RuntimeError, TypeError, ValueError) as exc:  # shapes or types the module cannot take
            raise BackendRunError(f"PyTorch failed running {type(self.module).__name__}: {clip(exc)}") from None
        named = _named(result)
        if outputs is None:
            return named
        missing = [n for n in outputs if n not in named]
        if missing:
            raise BackendRunError(f"PyTorch's {type(self.module).__name__} has no output {missing[0]!r}")
        return {n: named[n] for n in outputs}

    def version(self) -> str | None:
        import torch

        return torch.__version__

    def legend(self) -> str:
        threads = "the caller's threads" if self.threads is None else f"{self.threads} thread(s)"
        return (
            f"PyTorch {self.version()} eager, {type(self.module).__name__}, oneDNN "
            f"{'on' if self.onednn else 'off'}, {threads}"
        )


def _named(result) -> dict[str, np.ndarray]:
    import torch

    if isinstance(result, torch.Tensor):
        return {"output": result.detach().cpu().numpy()}
    if isinstance(result, dict):
        return {str(k): v.detach().cpu().numpy() for k, v in result.items()}
    return {f"output_{i}": v.detach().cpu().numpy() for i, v in enumerate(result)}
