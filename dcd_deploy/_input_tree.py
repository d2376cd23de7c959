"""A model whose ``forward`` takes dicts (or lists, tuples) of tensors, seen as one of
flat tensors.

An ONNX graph's inputs are flat tensors, so such a model is exported, checked and timed
through a *flat view* (:func:`flat_view`): the same module, its submodules shared under
their own paths, whose ``forward`` takes the leaves in order and calls the user's
``forward`` with the tree rebuilt. The tree (:class:`InputTree`) is written to the
file's metadata (:data:`TREE_KEY`), so a later check rebuilds the same tree from the
file's inputs without being told.

A node of the tree, as stored: an int (the index of a leaf, i.e. of the file's input),
``null`` (a ``None`` argument, as ``forward(x, mask=None)`` is called: no input),
``{"dict": {key: node}}``, ``{"list": [node]}`` or ``{"tuple": [node]}``. A dict node may
also hold ``"unread": [key]``: entries of the example's dict that ``forward`` never looked
up (a data loader's batch carries its labels and file names beside the image), left out
of the file (:func:`unread_entries`); a dict given later may hold them, and they are
dropped again.
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
        unread: the key paths of the dict entries left out because ``forward`` never
            reads them (``label``, ``batch.meta.path``).
    """

    args: tuple
    names: tuple[str, ...]
    unread: tuple[str, ...] = ()

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
        unread = {"unread": list(self.unread)} if self.unread else {}
        return json.dumps({"args": list(self.args), "names": list(self.names), **unread})

    @classmethod
    def from_json(cls, text: str) -> InputTree:
        data = json.loads(text)
        return cls(tuple(data["args"]), tuple(data["names"]), tuple(data.get("unread", ())))


def _collect(node, value, leaves: list) -> None:
    if node is None:
        if value is not None:
            raise DCDDeployError(f"inputs: expected None where the file takes no input, got {type(value).__name__}")
        return
    if isinstance(node, int):
        if not isinstance(value, torch.Tensor):
            raise DCDDeployError(f"inputs: expected a tensor for input {node}, got {type(value).__name__}")
        leaves[node] = value
        return
    kind, children = _parts(node)
    if kind == "dict":
        unread = node.get("unread", ())
        if not isinstance(value, dict) or [str(k) for k in value if k not in unread] != list(children):
            raise DCDDeployError(f"inputs: expected a dict with keys {', '.join(children)}")
        for key, child in children.items():
            _collect(child, value[key], leaves)
        return
    if not isinstance(value, (tuple, list)) or len(value) != len(children):
        raise DCDDeployError(f"inputs: expected a {kind} of {len(children)} items")
    for child, v in zip(children, value):
        _collect(child, v, leaves)


def _parts(node: dict) -> tuple[str, dict | list]:
    """(kind, children) of a stored node that is no leaf."""
    kind = next(k for k in ("dict", "list", "tuple") if k in node)
    return kind, node[kind]


def _built(node, flat):
    if node is None:
        return None
    if isinstance(node, int):
        return flat[node]
    kind, children = _parts(node)
    if kind == "dict":
        return {key: _built(child, flat) for key, child in children.items()}
    items = [_built(child, flat) for child in children]
    return items if kind == "list" else tuple(items)


def tree_of(model: nn.Module, args: tuple, *, unread: frozenset = frozenset()) -> InputTree | None:
    """The tree of ``args`` (``forward``'s positional arguments), None when every one is a
    tensor (the plain case: no view, no metadata). Leaves are named by key path: the keys
    alone for a single dict argument, else ``argname.key`` (list items by index).
    ``unread`` (:func:`unread_entries`) are the dict entries to leave out.

    Raises:
        ExportError: a leaf that is not a tensor, or a dict key that is not a string.
    """
    if all(isinstance(a, torch.Tensor) for a in args):
        return None
    params = positional_names(model)
    names: list[str] = []
    dropped: list[str] = []
    bare = len(args) == 1 and isinstance(args[0], dict)
    nodes = []
    for i, arg in enumerate(args):
        prefix = "" if bare else (params[i] if i < len(params) else f"input_{i}")
        nodes.append(_node(arg, prefix, names, (unread, dropped)))
    if len(set(names)) != len(names):
        raise ExportError(f"the inputs' key paths are not distinct: {', '.join(names)}")
    return InputTree(tuple(nodes), tuple(names), tuple(dropped))


def _node(value, path: str, names: list[str], unread: tuple[frozenset, list[str]]):
    def key_path(key) -> str:
        return f"{path}.{key}" if path else str(key)

    if isinstance(value, torch.Tensor):
        names.append(path or f"input_{len(names)}")
        return len(names) - 1
    if value is None:  # an optional argument left out: forward gets None, the file no input
        return None
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ExportError(f"input {path or 'dict'}: dict keys must be strings, got {list(value)}")
        skipped = [k for k in value if (id(value), k) in unread[0]]
        unread[1].extend(map(key_path, skipped))
        kept = {k: _node(v, key_path(k), names, unread) for k, v in value.items() if k not in skipped}
        return {"dict": kept, **({"unread": skipped} if skipped else {})}
    if isinstance(value, (tuple, list)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_node(v, key_path(i), names, unread) for i, v in enumerate(value)]}
    raise ExportError(
        f"input {path or '#0'} is a {type(value).__name__}; forward's arguments must be tensors "
        "or dicts, lists and tuples of them"
    )


def file_leaves(model: nn.Module, args, unread=()) -> tuple[torch.Tensor, ...]:
    """The tensors of ``args`` (``forward``'s arguments) that a file of ``model`` takes, in
    its input order: every leaf but those under an entry of ``unread`` (key paths, as
    :attr:`InputTree.unread` names them)."""
    args = tuple(args)
    tree = tree_of(model, args)
    if tree is None:
        return args

    return tuple(t for name, t in zip(tree.names, tree.flatten(args)) if not under(name, unread))


def under(name: str, paths) -> bool:
    """Whether the leaf ``name`` is one of the key ``paths`` or inside one (``aux.depth``
    under ``aux``)."""
    return any(name == p or name.startswith(p + ".") for p in paths)


def example_tree(model: nn.Module, args: tuple) -> InputTree | None:
    """:func:`tree_of` the example ``args``, the dict entries ``forward`` never reads left
    out (:func:`unread_entries`; no run of the model for arguments that hold no dict)."""
    return tree_of(model, args, unread=unread_entries(model, args))


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
        args, kwargs = _pre_hooks(self, self.__dict__[_VIEW].rebuild(flat))
        return _post_hooks(self, args, kwargs, base.forward(self, *args, **kwargs))

    def _call_impl(self, *args, **kwargs):
        # The root's own forward hooks take the arguments as the user's forward does (a
        # pre-hook reading batch["image"]): they run inside forward, on the tree rebuilt.
        if self._forward_pre_hooks or self._forward_hooks:
            return self.forward(*args, **kwargs)
        return nn.Module._call_impl(self, *args, **kwargs)

    forward.__doc__ = base.forward.__doc__
    attrs = {"forward": forward, "_call_impl": _call_impl, "__qualname__": base.__qualname__}
    return type(base.__name__, (base,), attrs)


def _pre_hooks(view: nn.Module, args: tuple) -> tuple[tuple, dict]:
    """(args, kwargs) after the root's forward pre-hooks, as ``nn.Module.__call__`` runs them."""
    kwargs: dict = {}
    for key, hook in list(view._forward_pre_hooks.items()):
        if key in view._forward_pre_hooks_with_kwargs:
            result = hook(view, args, kwargs)
            if result is not None:
                args, kwargs = result
        else:
            result = hook(view, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


def _post_hooks(view: nn.Module, args: tuple, kwargs: dict, out):
    """``out`` after the root's forward hooks, as ``nn.Module.__call__`` runs them."""
    for key, hook in list(view._forward_hooks.items()):
        with_kwargs = key in view._forward_hooks_with_kwargs
        result = hook(view, args, kwargs, out) if with_kwargs else hook(view, args, out)
        if result is not None:
            out = result
    return out


class _KeyLog(dict):
    """A copy of a dict of the example that notes which of its keys ``forward`` looks up:
    by key (``[]``, ``get``, ``in``, ``pop``, ``setdefault``) one at a time; by iterating
    (``items()``, ``**batch``, ``dict(batch)``, ``for``, ``==``) all of them."""

    __hash__ = None

    def __init__(self, source: dict, read: set):
        super().__init__((k, _logged(v, read)) for k, v in source.items())
        self._source, self._read = id(source), read

    def _note(self, *keys) -> None:
        self._read.update((self._source, k) for k in keys)

    def copy(self):
        return dict(self.items())


def _by_key(name: str):
    def method(self, key, *args):
        self._note(key)
        return getattr(dict, name)(self, key, *args)

    return method


def _by_all(name: str):
    def method(self, *args):
        self._note(*dict.keys(self))
        return getattr(dict, name)(self, *args)

    return method


for _name in ("__getitem__", "get", "__contains__", "pop", "setdefault"):
    setattr(_KeyLog, _name, _by_key(_name))
for _name in ("__iter__", "keys", "values", "items", "__eq__"):
    setattr(_KeyLog, _name, _by_all(_name))


def _logged(value, read: set):
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return _KeyLog(value, read)
    if isinstance(value, (tuple, list)):
        return type(value)(_logged(v, read) for v in value) if type(value) in (tuple, list) else value
    return value.clone() if isinstance(value, torch.Tensor) else value  # a forward may change it in place


def _dict_entries(value, out: set) -> set:
    if isinstance(value, dict):
        out.update((id(value), k) for k in value)
        for v in value.values():
            _dict_entries(v, out)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _dict_entries(v, out)
    return out


def unread_entries(model: nn.Module, args: tuple) -> frozenset:
    """The entries of ``args``'s dicts that ``model``'s ``forward`` never looks up, as
    (id of the dict, key) pairs for :func:`tree_of`: one eager run of a copy of the model
    (its hooks acting on the copy) in eval mode, without gradients, on copies of the dicts
    that note each lookup. Empty when the run fails: the entries are then all kept, and the
    export's own run says what went wrong.
    """
    from ._hooks import copy_model
    from ._modes import evaluating, onnx_exporting

    entries = _dict_entries(args, set())
    if not entries:
        return frozenset()
    read: set = set()
    try:
        copy = copy_model(model)
        with torch.no_grad(), torch.random.fork_rng(devices=[]), evaluating(copy), onnx_exporting():
            copy(*_logged(tuple(args), read))
    except Exception:  # noqa: BLE001 - the export's own run reports it
        return frozenset()
    return frozenset(entries - read)
