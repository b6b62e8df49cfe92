"""``PipeprofCallback`` for PyTorch Lightning: profile ``trainer.fit`` without launching through pipeprof.

    import lightning as L
    from pipeprof.integrations.lightning import PipeprofCallback

    trainer = L.Trainer(callbacks=[PipeprofCallback(name="mlp")])
    trainer.fit(model)

When fit begins the same hooks as ``pipeprof profile`` are installed; when it
ends (or raises) they are taken back and the run folder is written under
``out`` (default ``reports/``). The step split (``pipeprof/data_wait_share``,
``h2d_share``, ``compute_share``, ``other_share``, ``samples_per_s``,
``steps``) goes to the trainer's loggers (``trainer.loggers``:
TensorBoard, W&B, MLflow, CSV, as configured) when fit ends, at the last
step. For the ``lightning`` package (``import lightning as L``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from pipeprof.integrations.session import FitProfile, FitResults


class PipeprofCallback(FitResults, Callback):
    """Profile the fit: ``name`` and ``out`` name the run folder; ``options`` are ``pipeprof.profile()``'s
    (``warmup_steps``, ``sample_hz``, ``quiet``). After fit: ``summary``, ``folder``, ``split``."""

    def __init__(self, name: str = "lightning", out: str | Path = "reports", **options: Any) -> None:
        super().__init__()
        self.fit = FitProfile(name, out, options)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.fit.start()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.fit.finish():
            for logger in trainer.loggers:
                logger.log_metrics(self.fit.split, step=trainer.global_step)
                logger.save()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.fit.finish(exception)
