"""Ray Data and Ray Train: ``iter_torch_batches()`` feeds the loop; its batches are timed from the loop's side
(``script.loop_feed``). Not tried in the suite (Ray is too heavy to install for it)."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="Ray Data",
    packages=("ray",),
    sees="the loop's steps and its wait for each batch (not tried in the suite)",
)
