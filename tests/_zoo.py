"""Zoo helpers shared by the test modules: the input size each zoo model is tested at,
and pseudo-trained zoo models built once and cached.

Imported as ``_zoo``: tests/ has no ``__init__.py``, so pytest's default (prepend)
import mode puts this directory on ``sys.path`` when it loads tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from dcd_deploy import create_model, pseudo_train


def input_size(name: str, small: int = 64) -> int:
    """The input size zoo model ``name`` is tested at.

    DCD ResNets pool with the release's fixed 7x7 average (224 only); the other ResNets
    run at 64; every other model at ``small``, a small size its architecture allows.
    """
    if name.startswith("resnet"):
        return 224 if name.endswith("_dcd") else 64
    return small


def pseudo_trained(arch: str, size: int, seed: int, **config) -> nn.Module:
    """``create_model(arch, **config)`` pseudo-trained with ``seed`` at input ``size``."""
    return pseudo_train(create_model(arch, **config), seed=seed, input_size=size)


class ZooCache:
    """Zoo models built on first request and reused (tests never modify them).

    ``cache(arch, size=None, seed=None, **config)`` returns the model
    ``build(arch, size, seed, **config)`` made for that key, building it on a miss.

    size: the input size for a model name when a call gives none (``input_size``).
    seed: the seed when a call gives none; ``None`` seeds each model with the number of
        models built before it, so every model of the cache gets its own draw.
    keep_one: hold only the latest model (for suites grouped by model, with big models).
    build: how a model is made (``pseudo_trained``).
    """

    def __init__(
        self,
        *,
        size: Callable[[str], int] = input_size,
        seed: int | None = 0,
        keep_one: bool = False,
        build: Callable[..., nn.Module] = pseudo_trained,
    ):
        self.size, self.seed, self.keep_one, self.build = size, seed, keep_one, build
        self._models: dict = {}
        self._built = 0

    def __call__(self, arch: str, size: int | None = None, seed: int | None = None, **config) -> nn.Module:
        size = self.size(arch) if size is None else size
        seed = self.seed if seed is None else seed
        key = (arch, size, seed, tuple(sorted(config.items())))
        if key not in self._models:
            if self.keep_one:
                self._models.clear()
            self._models[key] = self.build(arch, size, self._built if seed is None else seed, **config)
            self._built += 1
        return self._models[key]
