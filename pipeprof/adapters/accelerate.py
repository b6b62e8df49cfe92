"""accelerate: ``accelerator.prepare`` hands the loop a ``DataLoaderShard`` / ``DataLoaderDispatcher`` that takes
batch k+1 from the DataLoader before it yields batch k: the loop's ``next()`` on it is timed (``script.frameworks``)."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="accelerate",
    packages=("accelerate",),
    framework="accelerate",
    framework_packages=("accelerate",),
    launchers=("accelerate.commands.launch",),
    look_ahead={"accelerate.data_loader": ("DataLoaderShard", "DataLoaderDispatcher")},
    sees="the loop's next() on the prepared loader (one batch ahead), the DataLoader inside with its workers",
)
