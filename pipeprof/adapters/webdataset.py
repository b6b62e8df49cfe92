"""WebDataset: its pipelines apply a sample's functions as stages (``map``, ``map_tuple``); the user's functions
there are timed as transforms, WebDataset's own are not (``script.transform_hooks``)."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="WebDataset",
    packages=("webdataset",),
    pipeline_datasets=frozenset({"WebDataset", "DataPipeline", "FluidWrapper"}),
    stage_functions=frozenset({"_map", "_map_tuple"}),
    own_functions=("webdataset",),
    sees=("WebLoader / DataLoader over a WebDataset as a DataLoader; the functions of map / map_tuple stages timed "
          "as transforms; ready-made batches (.batched()) counted by their leading dimension"),
)
