"""llamafit's version, in a module of its own so that any layer can name it (llamafit/__init__.py
re-exports it as `llamafit.__version__`)."""

__version__ = "0.1.0"
