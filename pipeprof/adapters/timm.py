"""timm: ``create_loader`` returns a ``PrefetchLoader`` that starts the next batch's copy and normalisation before
it yields the current one: the loop's ``next()`` on it is timed (``script.frameworks``)."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="timm",
    packages=("timm",),
    look_ahead={"timm.data.loader": ("PrefetchLoader",)},
    sees=("the loop's next() on the PrefetchLoader (one batch ahead), named as the code names the wrapper; "
          "create_transform's transforms timed"),
)
