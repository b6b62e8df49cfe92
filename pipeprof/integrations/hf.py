"""``PipeprofCallback`` for the Hugging Face ``Trainer``: profile ``trainer.train()`` without launching through
pipeprof.

    from transformers import Trainer
    from pipeprof.integrations.hf import PipeprofCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[PipeprofCallback(name="bert")])
    trainer.train()

When training begins the same hooks as ``pipeprof profile`` are installed;
at the Trainer's last log of ``train()`` (the one with ``train_runtime``,
after the last step) they are taken back, the run folder is written under
``out`` (default ``reports/``), and the step split (``pipeprof/data_wait_share``,
``h2d_share``, ``compute_share``, ``other_share``, ``samples_per_s``,
``steps``) is added to that log: callbacks after this one (and
``trainer.state.log_history``) get it. The Trainer calls its ``report_to``
integrations before the callbacks given to it; to reach them too, put this
callback first: ``trainer.callback_handler.callbacks.insert(0, PipeprofCallback())``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from pipeprof.integrations.session import FitProfile, FitResults

END_OF_TRAIN_KEY = "train_runtime"  # in the one log train() writes after its last step


class PipeprofCallback(FitResults, TrainerCallback):
    """Profile the training: ``name`` and ``out`` name the run folder; ``options`` are ``pipeprof.profile()``'s
    (``warmup_steps``, ``sample_hz``, ``quiet``). After train(): ``summary``, ``folder``, ``split``."""

    def __init__(self, name: str = "hf-trainer", out: str | Path = "reports", **options: Any) -> None:
        self.fit = FitProfile(name, out, options)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.fit.start()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is None or END_OF_TRAIN_KEY not in logs or not self.fit.finish():
            return
        logs.update(self.fit.split)
        if state.log_history and END_OF_TRAIN_KEY in state.log_history[-1]:
            state.log_history[-1].update(self.fit.split)  # the Trainer's own record (trainer_state.json)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.fit.finish()  # a train() that wrote no final log; a no-op after on_log
