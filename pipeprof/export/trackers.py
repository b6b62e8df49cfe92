"""Send an ``ExportSeries`` and its texts to a tracker: TensorBoard event files, an MLflow run, a W&B run.

Each tracker's package is an optional extra (``pipeprof[tensorboard]``,
``pipeprof[mlflow]``, ``pipeprof[wandb]``), imported here only when that
format is asked for; a missing one is ``MissingExtra``, which names the
extra. Nothing is uploaded by default: TensorBoard writes files; MLflow uses
the tracking server the user configured (``MLFLOW_TRACKING_URI``) or a local
file store; W&B runs offline unless the user set ``WANDB_MODE``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import UsageError
from pipeprof.export.series import ExportSeries

MLFLOW_BATCH = 1000  # metrics per log_batch call: MLflow's own limit
PARAM_PREFIX = "pipeprof."  # the run's settings, apart from the user's own params of the same name


class MissingExtra(UsageError):
    """A tracker's package is not installed: which extra installs it."""

    def __init__(self, fmt: str, package: str) -> None:
        super().__init__(f"--format {fmt} needs the {package} package, which is not installed: "
                         f"pip install 'pipeprof[{fmt}]'")


@dataclass(frozen=True)
class Exported:
    """Where an export went: ``location`` (a folder or a tracking URI) and the tracker's ``run_id`` (None for
    TensorBoard)."""

    location: str
    run_id: str | None = None
    skipped: tuple[str, ...] = ()  # what the tracker already held and would not take again (MLflow's params)


def _ms(t_s: float, start_epoch_s: float | None) -> int:
    return int(round(1000.0 * ((start_epoch_s or 0.0) + t_s)))


def write_tensorboard(series: ExportSeries, texts: Mapping[str, str], log_dir: Path, *,
                      start_epoch_s: float | None) -> Exported:
    """Event files under ``log_dir``, written by ``torch.utils.tensorboard.SummaryWriter`` (needs ``tensorboard``).

    Each point at its step, with the wall time ``start_epoch_s + t_s``; each text at the last step. The files are
    written into a hidden folder beside ``log_dir`` and moved in once whole: a disk that fills or a folder that
    cannot be written leaves nothing behind (an ``OSError`` naming ``log_dir``), so running it again works. The
    writer's own thread fails with the error the caller gets: its traceback is not printed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise MissingExtra("tensorboard", "tensorboard") from None
    last = int(series.points["step"].max()) if len(series.points) else 0
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=log_dir.parent, prefix=f".{log_dir.name}.", suffix=".tmp"))
    failed: list[BaseException] = []
    shown = threading.excepthook
    threading.excepthook = lambda hook: failed.append(hook.exc_value) if hook.exc_value is not None else None
    try:
        writer = SummaryWriter(log_dir=str(stage))
        try:
            for tag, step, value, t_s in series.points.itertuples(index=False):
                writer.add_scalar(tag, value, global_step=int(step),
                                  walltime=None if start_epoch_s is None else start_epoch_s + t_s)
            for tag, text in texts.items():
                writer.add_text(tag, text, global_step=last)
        finally:
            writer.close()
        if failed:
            raise failed[0]
        log_dir.mkdir(exist_ok=True)
        for made in stage.iterdir():
            os.replace(made, log_dir / made.name)
    except OSError as e:
        raise OSError(e.errno, e.strerror or str(e), str(log_dir)) from e
    finally:
        threading.excepthook = shown
        shutil.rmtree(stage, ignore_errors=True)
    return Exported(str(log_dir))


@contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 refuses its file store unless told it is wanted; a local ``file:`` store is what we chose."""
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    if uri.startswith("file:") and before is None:
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def log_mlflow(series: ExportSeries, texts: Mapping[str, str], params: Mapping[str, Any], *, tracking_uri: str,
               experiment: str, run_name: str, run_id: str | None, start_epoch_s: float | None) -> Exported:
    """The points as metrics, the settings as params and the texts as Markdown artifacts of an MLflow run:
    ``run_id``'s, or a new run in ``experiment`` (created when absent), through ``MlflowClient(tracking_uri)``.
    Params are named ``pipeprof.<section.key>``; one the run already holds with another value is skipped and
    named in ``Exported.skipped`` (MLflow refuses to change a param)."""
    try:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise MissingExtra("mlflow", "mlflow") from None
    with _file_store_allowed(tracking_uri):
        client = MlflowClient(tracking_uri=tracking_uri)
        created = run_id is None
        if run_id is None:
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
            run_id = client.create_run(experiment_id, run_name=run_name).info.run_id
        metrics = [Metric(tag, float(value), _ms(t_s, start_epoch_s), int(step))
                   for tag, step, value, t_s in series.points.itertuples(index=False)]
        for i in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(run_id, metrics=metrics[i:i + MLFLOW_BATCH])
        held = {} if created else client.get_run(run_id).data.params
        ours = {f"{PARAM_PREFIX}{k}": str(v)[:6000] for k, v in params.items()}
        skipped = tuple(f"param {k}: the run already has it ({held[k]!r})" for k in sorted(ours)
                        if k in held and held[k] != ours[k])  # MLflow never changes a logged param
        new = [Param(k, v) for k, v in sorted(ours.items()) if k not in held]
        if new:
            client.log_batch(run_id, params=new)
        for tag, text in texts.items():
            client.log_text(run_id, text, f"{tag}.md")
        if created:
            client.set_terminated(run_id)
    return Exported(tracking_uri, run_id, skipped)


def log_wandb(series: ExportSeries, texts: Mapping[str, str], params: Mapping[str, Any], *, directory: Path,
              project: str, run_name: str, run_id: str | None) -> Exported:
    """The points of each step as one ``run.log`` (x-axis ``pipeprof/step``), the settings as the run's config
    and the texts in its summary; offline unless ``WANDB_MODE`` says otherwise; ``run_id`` resumes that run."""
    try:
        import wandb
    except ImportError:
        raise MissingExtra("wandb", "wandb") from None
    directory.mkdir(exist_ok=True)
    run = wandb.init(project=project, name=run_name, id=run_id, resume="allow" if run_id else None,
                     dir=str(directory), mode=None if os.environ.get("WANDB_MODE") else "offline", config=dict(params))
    try:
        run.define_metric("pipeprof/step")
        run.define_metric("*", step_metric="pipeprof/step")
        for _, rows in series.points.groupby("step", sort=True):
            values = {str(t): float(v) for t, v in zip(rows["tag"], rows["value"])}
            run.log({"pipeprof/step": int(rows["step"].tolist()[0]), **values})
        for tag, text in texts.items():
            run.summary[tag] = text
        return Exported(str(directory), str(run.id))
    finally:
        run.finish()
