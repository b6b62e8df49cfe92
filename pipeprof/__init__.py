"""pipeprof: a data-pipeline bottleneck profiler for PyTorch training."""

from pipeprof.version import __version__

__all__ = ["__version__", "profile", "Profile"]


def __getattr__(name: str):
    # ``pipeprof.profile`` without importing torch for every ``import pipeprof`` (the CLI's modules need not).
    if name in ("profile", "Profile"):
        from pipeprof import api
        return getattr(api, name)
    raise AttributeError(f"module 'pipeprof' has no attribute {name!r}")
