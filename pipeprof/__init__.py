"""pipeprof: a data-pipeline bottleneck profiler for PyTorch training."""

__version__ = "0.1.0"
