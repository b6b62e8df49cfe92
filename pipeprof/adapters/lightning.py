"""Lightning (``lightning``, ``pytorch_lightning``, Fabric): loaders built in a LightningModule's
``train_dataloader()`` are re-built by Lightning; a change is written in the function that built the loader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeprof.adapters.base import Adapter


def write_change(settings: Mapping[str, Any], built_in: str | None, as_dataloader: str) -> str | None:
    return f"the DataLoader built in {built_in}(): {as_dataloader}" if built_in else None


ADAPTER = Adapter(
    name="Lightning",
    packages=("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities"),
    framework="lightning",
    framework_packages=("lightning", "pytorch_lightning", "lightning_fabric"),
    write_change=write_change,
    sees=("its loaders as DataLoaders, named by the function that built them (train_dataloader()); the sanity "
          "check and validation loaders as evaluation; changes written in that function"),
)
