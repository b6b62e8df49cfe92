"""torch's own ``DataLoader``: the loader the hooks are built around (``script.hooks``); nothing to add here."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="torch DataLoader",
    sees=("on the loop's thread: its next() (the data wait), its workers' record of every batch (fetch, waiting "
          "for a core, prep, collate), each transform and decode call; iterated on another thread: its busy time "
          "(role background)"),
)
