"""fastai: its own ``DataLoader`` (no torch DataLoader: it drives torch's worker iterators itself) feeds
``Learner.fit``; its loop's batches are timed from the loop's side (``script.loop_feed``). Its ``Optimizer`` is
no ``torch.optim`` optimizer: its ``step()`` ends a training step."""

from pipeprof.adapters.base import Adapter

ADAPTER = Adapter(
    name="fastai",
    packages=("fastai", "fastcore"),
    own_step={"fastai.optimizer": ("Optimizer",)},
    sees=("Learner.fit's steps (fastai's optimizer step), the loop's wait for each batch and its validation "
          "passes; how its workers make batches is not recorded"),
)
