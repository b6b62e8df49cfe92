"""litdata: ``StreamingDataset`` and ``StreamingDataLoader`` (a DataLoader subclass) are profiled as a DataLoader
and its dataset."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="litdata",
    packages=("litdata",),
    sees="StreamingDataLoader as a DataLoader, with its workers' record of each batch",
)
