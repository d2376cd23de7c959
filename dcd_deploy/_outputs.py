"""A model's outputs as a tree of tensors: dataclass outputs among tuples, lists and dicts.

A user's network may return a ``@dataclass`` (``Out(logits=..., feats=...)``), as
training code written around structured outputs does. ``torch.export`` flattens only
the types ``torch.utils._pytree`` knows, and refuses others ("Found <class 'Out'> in
output, which is not a known type"). A dataclass is a node whose children are its
``init`` fields, the fields ``pytree.register_dataclass`` takes; the export names the
ONNX outputs by them (``logits``, ``feats``) and the parity check matches them by name,
as for a dict.

:func:`output_leaves` is the one walk of a model's outputs: the export names the file's
outputs by it and the parity check matches the model's outputs to them by it, so both
see the leaves in the order ``torch.export`` flattens them (``pytree``'s: dict insertion
order, dataclass fields in declaration order, a ``None`` dropped).

Registration with ``pytree`` is process-wide, so it is scoped to the export's own use
(:func:`dataclasses_as_nodes`) and undone after: the user's process is left as found.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

#: A leaf's place in the output tree: dict keys, dataclass and namedtuple field names
#: (str) and sequence indices (int), outermost first; () for a lone tensor.
KeyPath = tuple[str | int, ...]


def dataclass_fields(value) -> list[tuple[str, object]] | None:
    """``value``'s init fields as (name, value) pairs when it is a dataclass instance, else None."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return None
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if f.init]


def dataclass_types(out) -> tuple[type, ...]:
    """The dataclass types within ``out`` (a tensor, tuple, list, dict or dataclass, nested),
    outermost first, each once."""
    found: list[type] = []

    def walk(value) -> None:
        fields = dataclass_fields(value)
        if fields is not None:
            if type(value) not in found:
                found.append(type(value))
            children = [v for _, v in fields]
        elif isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, (tuple, list)):
            children = list(value)
        else:
            return
        for child in children:
            walk(child)

    walk(out)
    return tuple(found)


@contextlib.contextmanager
def dataclasses_as_nodes(types: tuple[type, ...]) -> Iterator[None]:
    """``torch.utils._pytree`` flattens ``types`` by their init fields within the block.

    Types it knows already (registered by the user, or a namedtuple) are left alone.
    """
    if not types:
        yield
        return
    import torch.utils._pytree as pytree

    added = [t for t in types if t not in pytree.SUPPORTED_NODES]
    for t in added:  # a serialized name: the registry's undo looks it up
        pytree.register_dataclass(t, serialized_type_name=f"dcd_deploy.output:{t.__module__}.{t.__qualname__}")
    try:
        yield
    finally:
        for t in added:
            pytree._deregister_pytree_node(t)


def output_leaves(out) -> tuple[list[tuple[KeyPath, object]], tuple[type, ...]]:
    """The leaves of ``out`` with their paths, in ``torch.export``'s order, and the
    dataclass types among its nodes (to register while tracing, :func:`dataclasses_as_nodes`).

    A leaf is whatever ``pytree`` does not take apart: a tensor, or a value the caller
    refuses (a string, an int). ``None`` is no leaf: torch.onnx leaves it out of the graph
    (``return y, None``: an auxiliary head off in eval).
    """
    import torch.utils._pytree as pytree

    types = dataclass_types(out)
    with dataclasses_as_nodes(types):
        flat = pytree.tree_flatten_with_path(out)[0]
    return [(tuple(_key(k) for k in keys), leaf) for keys, leaf in flat if leaf is not None], types


def leaf_name(path: KeyPath, *, keyed: bool) -> str:
    """A leaf's name: its keys joined by ``.`` (``heads.boxes``, ``levels.0``) when
    ``keyed``, else ``output_`` and its path (``output_1_a``) as torch.onnx's names go."""
    parts = [str(k) for k in path]
    return ".".join(parts) if keyed else "output_" + "_".join(parts)


def _key(entry) -> str | int:
    """A ``pytree`` key entry (``MappingKey``, ``SequenceKey``, ``GetAttrKey``) as its key."""
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    raise TypeError(f"unknown pytree key entry {entry!r}")
