"""Hugging Face ``datasets`` and the ``transformers`` Trainer.

The Trainer builds its loaders in ``get_train_dataloader()`` / ``get_eval_dataloader()`` and iterates them
through accelerate; its loader settings are ``TrainingArguments(dataloader_...)``. A ``datasets`` Dataset's
``with_transform`` / ``set_transform`` function is timed as a transform (``script.transform_hooks``); its Arrow
table reads are not timed apart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeprof.adapters.base import Adapter

# TrainingArguments' names for the DataLoader settings the Trainer builds its loaders with
TRAINING_ARGUMENTS = {"loader.num_workers": "dataloader_num_workers", "loader.pin_memory": "dataloader_pin_memory",
                      "loader.prefetch_factor": "dataloader_prefetch_factor",
                      "loader.persistent_workers": "dataloader_persistent_workers"}


def write_change(settings: Mapping[str, Any], built_in: str | None, as_dataloader: str) -> str | None:
    if not all(k in TRAINING_ARGUMENTS for k in settings):
        return None
    return f"TrainingArguments({', '.join(f'{TRAINING_ARGUMENTS[k]}={v!r}' for k, v in settings.items())})"


ADAPTER = Adapter(
    name="Hugging Face datasets and Trainer",
    packages=("transformers", "datasets"),
    framework="transformers",
    framework_packages=("transformers",),
    builder=("transformers", r"get_(\w+?)_dataloader$", "Trainer {} loader"),
    table_reads=("datasets.", "a Hugging Face datasets Dataset: its Arrow table reads (query_table) and their "
                              "conversion to Python"),
    write_change=write_change,
    sees=("the Trainer's loaders as DataLoaders (named \"Trainer train loader\"), one step per optimizer step with "
          "gradient accumulation; with_transform / set_transform functions timed as transforms; Arrow reads not "
          "timed apart (absences.reads); changes written as TrainingArguments(dataloader_...)"),
)
