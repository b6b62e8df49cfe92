"""pipeprof's version, in a module of its own: what writes it into run.json need not import the package's
``__init__`` (which reaches ``pipeprof.api`` for ``pipeprof.profile``)."""

__version__ = "0.1.0"
