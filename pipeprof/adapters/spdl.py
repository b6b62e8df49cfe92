"""SPDL: a pipeline of thread pools and an event loop feeds the loop through ``get_iterator()``; its batches are
timed from the loop's side (``script.loop_feed``)."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="SPDL",
    packages=("spdl",),
    sees="the loop's steps and its wait for each batch; the pipeline's stages are not timed apart",
)
