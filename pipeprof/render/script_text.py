"""How a recommendation's change is written for the person who makes it.

For a scenario: ``--set key=VALUE`` (``render.interval_text.change_text``). For a script: the Python
to write where the training loader is built (``script_text``): the thread
count first and alone (it is the process's, never a loader's), then the
loader settings as the code of the library that built the loader writes them
(``pipeprof.adapters``: a Trainer's arguments, the function that built it),
and as the loader's ``DataLoader(...)`` keywords otherwise
(``dataloader_kwargs``, also the tuner's answer).
"""

from __future__ import annotations

from typing import Any

from pipeprof import adapters
from pipeprof.analysis.reasons import WRITTEN, Reason
from pipeprof.run_meta import LoaderInfo


def script_words(r: Reason) -> str:
    """A recommendation's ``script_text`` (kind ``script_text``: ``script_text(change, loader)``; read back from a
    summary.json, the Python as written)."""
    if r.kind == WRITTEN:
        return str(r["text"])
    return script_text(r["change"], r["loader"])


def script_text(change: dict[str, Any], loader: LoaderInfo) -> str:
    """The Python a script's author writes for ``change``, where their code builds the training loader
    (``loader``: its description in run.json's ``loaders``; ``framework`` absent in older runs).

    The thread count comes first and alone (it is the process's, never a loader's); loader settings are written
    as the library that built the loader has them (``adapters.write_change``), and as the loader's
    ``DataLoader(...)`` under its name otherwise; a loader setting equal to the loader's own is left out."""
    parts = []
    if change.get("train.threads"):
        parts.append(f"torch.set_num_threads({change['train.threads']})")
    # A setting the loader already has is no change to write (a thread change keeps the workers as they are).
    settings = {k: v for k, v in change.items() if k.startswith("loader.") and v is not None
                and loader.setting(k.partition(".")[2]) != v}
    if settings:
        dataset = f"{loader.setting('dataset') or 'dataset'}(...)"
        as_dataloader = dataloader_kwargs(settings, dataset)
        own = adapters.write_change(loader.framework, settings, loader.built_in, as_dataloader)
        parts.append(own or f"{loader.name or 'the training loader'}: {as_dataloader}")
    return "; ".join(parts)


def dataloader_kwargs(settings: dict[str, Any], dataset: str = "dataset") -> str:
    """The loader settings as Python: DataLoader keyword arguments, plus threads and placement as comments."""
    kwargs = []
    for key in ("loader.batch_size", "loader.num_workers", "loader.prefetch_factor", "loader.persistent_workers",
                "loader.pin_memory"):
        if key in settings and settings[key] is not None:
            kwargs.append(f"{key.partition('.')[2]}={settings[key]!r}")
    lines = [f"DataLoader({dataset}, {', '.join(kwargs)})"]
    if settings.get("train.threads"):
        lines.append(f"torch.set_num_threads({settings['train.threads']})")
    storage = settings.get("data.storage")
    if storage == "device":
        lines = ["# hold the whole data set on the device and take batches by index (no DataLoader)",
                 f"torch.set_num_threads({settings['train.threads']})" if settings.get("train.threads") else ""]
    elif storage == "ram":
        lines.insert(0, "# decode the data set once into RAM (e.g. a TensorDataset) and load from there")
    return "\n".join(line for line in lines if line)
