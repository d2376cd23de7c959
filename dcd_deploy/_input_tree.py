"""A model whose ``forward`` takes dicts (or lists, tuples) of tensors, seen as one of
flat tensors.

An ONNX graph's inputs are flat tensors, so such a model is exported, checked and timed
through a *flat view* (:func:`flat_view`): the same module, its submodules shared under
their own paths, whose ``forward`` takes the leaves in order and calls the user's
``forward`` with the tree rebuilt. The tree (:class:`InputTree`) is written to the
file's metadata (:data:`TREE_KEY`), so a later check rebuilds the same tree from the
file's inputs without being told.

A node of the tree, as stored: an int (the index of a leaf, i.e. of the file's input),
``{"dict": {key: node}}``, ``{"list": [node]}`` or ``{"tuple": [node]}``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import torch
from torch import nn

from ._forward import positional_names
from .errors import DCDDeployError, ExportError

#: metadata_props key of the input tree (JSON: ``{"args": [node], "names": [str]}``).
TREE_KEY = "dcd_deploy.input_tree"
_VIEW = "_dcd_input_tree"  # the flat view's attribute holding its tree


@dataclass(frozen=True)
class InputTree:
    """How ``forward``'s positional arguments are made of the file's flat inputs.

    Attributes:
        args: one node per positional argument (see the module docstring).
        names: each leaf's name, in leaf order: the file's input names.
    """

    args: tuple
    names: tuple[str, ...]

    def flatten(self, args: tuple) -> tuple[torch.Tensor, ...]:
        """The leaves of ``args`` (a tuple of arguments of this tree's structure).

        Raises:
            DCDDeployError: ``args`` has another structure (keys, lengths) or a non-tensor leaf.
        """
        leaves: list = [None] * len(self.names)
        if not isinstance(args, (tuple, list)) or len(args) != len(self.args):
            raise DCDDeployError(f"inputs: expected {len(self.args)} argument(s) as forward takes them")
        for node, value in zip(self.args, args):
            _collect(node, value, leaves)
        return tuple(leaves)

    def fits(self, args) -> bool:
        """Whether ``args`` has this tree's structure (:meth:`flatten` would take it)."""
        try:
            self.flatten(args)
        except DCDDeployError:
            return False
        return True

    def flat_inputs(self, value):
        """``value`` as flat tensors when it is this tree's arguments (a tuple of them, or
        the one argument alone); else as it is (None, a tensor, a tuple in the file's input
        order, a dict by input name)."""
        for args in (value, (value,)):
            if self.fits(args):
                return self.flatten(args)
        return value

    def applied(self, model: nn.Module, *values) -> tuple:
        """(``model``'s flat view, then each of ``values`` as flat tensors by
        :meth:`flat_inputs`): a model and its inputs as a file of this tree takes them."""
        return (flat_view(model, self), *(self.flat_inputs(v) for v in values))

    def rebuild(self, flat) -> tuple:
        """The positional arguments made of ``flat`` (the leaves in order)."""
        return tuple(_built(node, flat) for node in self.args)

    def to_json(self) -> str:
        return json.dumps({"args": list(self.args), "names": list(self.names)})

    @classmethod
    def from_json(cls, text: str) -> InputTree:
        data = json.loads(text)
        return cls(tuple(data["args"]), tuple(data["names"]))


def _collect(node, value, leaves: list) -> None:
    if isinstance(node, int):
        if not isinstance(value, torch.Tensor):
            raise DCDDeployError(f"inputs: expected a tensor for input {node}, got {type(value).__name__}")
        leaves[node] = value
        return
    ((kind, children),) = node.items()
    if kind == "dict":
        if not isinstance(value, dict) or list(map(str, value)) != list(children):
            raise DCDDeployError(f"inputs: expected a dict with keys {', '.join(children)}")
        for key, child in children.items():
            _collect(child, value[key], leaves)
        return
    if not isinstance(value, (tuple, list)) or len(value) != len(children):
        raise DCDDeployError(f"inputs: expected a {kind} of {len(children)} items")
    for child, v in zip(children, value):
        _collect(child, v, leaves)


def _built(node, flat):
    if isinstance(node, int):
        return flat[node]
    ((kind, children),) = node.items()
    if kind == "dict":
        return {key: _built(child, flat) for key, child in children.items()}
    items = [_built(child, flat) for child in children]
    return items if kind == "list" else tuple(items)


def tree_of(model: nn.Module, args: tuple) -> InputTree | None:
    """The tree of ``args`` (``forward``'s positional arguments), None when every one is a
    tensor (the plain case: no view, no metadata). Leaves are named by key path: the keys
    alone for a single dict argument, else ``argname.key`` (list items by index).

    Raises:
        ExportError: a leaf that is not a tensor, or a dict key that is not a string.
    """
    if all(isinstance(a, torch.Tensor) for a in args):
        return None
    params = positional_names(model)
    names: list[str] = []
    bare = len(args) == 1 and isinstance(args[0], dict)
    nodes = []
    for i, arg in enumerate(args):
        prefix = "" if bare else (params[i] if i < len(params) else f"input_{i}")
        nodes.append(_node(arg, prefix, names))
    if len(set(names)) != len(names):
        raise ExportError(f"the inputs' key paths are not distinct: {', '.join(names)}")
    return InputTree(tuple(nodes), tuple(names))


def _node(value, path: str, names: list[str]):
    if isinstance(value, torch.Tensor):
        names.append(path or f"input_{len(names)}")
        return len(names) - 1
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ExportError(f"input {path or 'dict'}: dict keys must be strings, got {list(value)}")
        return {"dict": {k: _node(v, f"{path}.{k}" if path else k, names) for k, v in value.items()}}
    if isinstance(value, (tuple, list)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_node(v, f"{path}.{i}" if path else str(i), names) for i, v in enumerate(value)]}
    raise ExportError(
        f"input {path or '#0'} is a {type(value).__name__}; forward's arguments must be tensors "
        "or dicts, lists and tuples of them"
    )


def read_tree(proto) -> InputTree | None:
    """The input tree an ONNX ``ModelProto`` records (None for a file of plain inputs)."""
    text = next((p.value for p in proto.metadata_props if p.key == TREE_KEY), None)
    return None if text is None else InputTree.from_json(text)


def tree_of_view(model: nn.Module) -> InputTree | None:
    """The tree of a flat view (:func:`flat_view`), None for any other module."""
    return model.__dict__.get(_VIEW)


def flat_view(model: nn.Module, tree: InputTree) -> nn.Module:
    """``model`` taking the leaves of ``tree`` as its positional arguments.

    The view is an instance of a subclass of ``model``'s class (same name) over the same
    submodules, parameters and buffers, so module paths, state dict keys and messages are
    the user's own; its top-level module dicts are its own, so swapping a child of the
    view (the exporter works on copies anyway) leaves ``model`` as it was.
    """
    if tree_of_view(model) is not None:
        return model
    cls = _view_class(type(model))
    view = cls.__new__(cls)
    view.__dict__.update(model.__dict__)
    for key in ("_modules", "_parameters", "_buffers"):
        view.__dict__[key] = type(model.__dict__[key])(model.__dict__[key])
    view.__dict__[_VIEW] = tree
    return view


@functools.cache
def _view_class(base: type) -> type:
    def forward(self, *flat):
        return base.forward(self, *self.__dict__[_VIEW].rebuild(flat))

    forward.__doc__ = base.forward.__doc__
    return type(base.__name__, (base,), {"forward": forward, "__qualname__": base.__qualname__})
