"""The toolkit's version, in a module of its own.

Modules that record the version (ONNX metadata, benchmark machine info) import it from
here rather than from the package ``__init__``, so they do not import the package's
public API (and with it the model zoo) just to read a string. ``pyproject.toml`` reads
it from here too, so there is one place to bump it.
"""

__version__ = "0.1.0"
