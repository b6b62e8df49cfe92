"""MosaicML streaming (the ``streaming`` package): a ``StreamingDataset`` under a torch DataLoader."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="mosaicml-streaming",
    packages=("streaming",),
    sees="its StreamingDataset under a DataLoader, with the workers' record of each batch",
)
