"""Export a run folder: as a timeline (chrome-trace), or to the trackers users watch (TensorBoard, MLflow, W&B).

--format chrome-trace writes Trace Event Format JSON (default: RUN/trace.json), which
https://ui.perfetto.dev and chrome://tracing open.

--format tensorboard, mlflow and wandb send the run's series: per step the data
wait, host → device, compute and other (ms), samples/s and the prefetch queue
depth; per throughput window samples/s, each worker's busy share, CPU and
memory, the training process's CPU and memory, the machine's CPU and the GPU's
use; and the verdict, the top recommendations and what could not be measured,
as text. Nothing is uploaded unless the tracker is configured to:
  tensorboard  event files in RUN/tensorboard, or in DIR/<run folder name> with -o DIR
               (then `tensorboard --logdir DIR` shows runs side by side)
  mlflow       the tracking server in MLFLOW_TRACKING_URI, else a local file store (RUN/mlruns, or -o DIR);
               a new run in the experiment --project (default: pipeprof), or --run-id ID's
  wandb        an offline run under RUN (or -o DIR) unless WANDB_MODE says otherwise (then `wandb sync`);
               in the project --project, or resuming --run-id ID
Each needs its package: pip install 'pipeprof[tensorboard]' (or [mlflow], [wandb]).

Exit status: 0 when exported, 2 for bad input (a missing or damaged run
folder, a bad -o, a tracker's package not installed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from pipeprof.errors import UsageError

FORMATS = ("chrome-trace", "tensorboard", "mlflow", "wandb")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run folder, e.g. reports/20261129T120000Z-quick")
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="chrome-trace: Trace Event Format JSON for Perfetto / chrome://tracing; tensorboard, "
                        "mlflow, wandb: the run's series in that tracker")
    p.add_argument("-o", "--output", type=Path, metavar="PATH",
                   help="chrome-trace: the file (default: RUN/trace.json); tensorboard: the log folder "
                        "(default: RUN/tensorboard); mlflow: a local store folder; wandb: the folder of its files")
    p.add_argument("--project", default="pipeprof", metavar="NAME",
                   help="MLflow experiment / W&B project of a new run (default: pipeprof)")
    p.add_argument("--run-id", metavar="ID", help="log to this existing MLflow or W&B run instead of a new one")


def execute(args: argparse.Namespace) -> int:
    from pipeprof.run_check import refuse_damaged
    from pipeprof.run_folder import load_run

    folder = Path(args.run)
    run = load_run(folder)
    refuse_damaged(folder, run.damage, "a trace" if args.format == "chrome-trace" else "an export")
    if args.format == "chrome-trace":
        return _chrome_trace(run, folder, args.output)
    if args.run_id is not None and args.format == "tensorboard":
        raise UsageError("--run-id: TensorBoard has no runs to log to (it is for --format mlflow or wandb)")
    return _tracker(run, folder, args)


def _chrome_trace(run: Any, folder: Path, output: Path | None) -> int:
    from pipeprof.render.trace import chrome_trace  # pandas loads here, not for --help
    from pipeprof.run_folder import write_output

    output = output if output is not None else folder / "trace.json"
    if output.is_dir():
        raise UsageError(f"--output {output}: is a folder (give a file name, e.g. {output / 'trace.json'})")
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: no such folder {output.parent}")
    text = json.dumps(chrome_trace(run), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    try:
        write_output(output, text + "\n")
    except OSError as e:
        raise UsageError(f"--output {output}: cannot write it ({e.strerror or e})") from None
    print(f"trace: {output}")
    print("open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


def _start_epoch_s(created_utc: str | None) -> float | None:
    """The run's start on the wall clock (run.json's created_utc), for the trackers' time axes; None if unknown."""
    try:
        return dt.datetime.strptime(str(created_utc), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return None


def _out_folder(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"--output {path}: exists and is not a folder")
    if not path.parent.is_dir():
        raise UsageError(f"--output {path}: no such folder {path.parent}")
    return path


def _tracker(run: Any, folder: Path, args: argparse.Namespace) -> int:
    from pipeprof.analysis.compare import flatten_settings
    from pipeprof.analysis.summary import summary_record
    from pipeprof.export import trackers
    from pipeprof.export.series import export_series
    from pipeprof.export.text import export_texts

    name = folder.resolve().name
    series = export_series(run)
    texts = export_texts(summary_record(run), series)
    params = flatten_settings(run.info.scenario)
    start = _start_epoch_s(run.info.created_utc)
    if args.format == "tensorboard":
        log_dir = folder / "tensorboard" if args.output is None else _out_folder(args.output) / name
        if log_dir.is_dir() and any(p.name.startswith("events.out.tfevents") for p in log_dir.iterdir()):
            raise UsageError(f"{log_dir}: already holds an export (TensorBoard would show every point twice); "
                             "remove it or give another -o")
        try:
            done = trackers.write_tensorboard(series, texts, log_dir, start_epoch_s=start)
        except OSError as e:
            raise UsageError(f"{log_dir}: cannot write the export ({e.strerror or e}); nothing was left there: "
                             "make room (or give another -o) and run it again") from None
        print(f"tensorboard: {done.location}")
        print(f"open it with: tensorboard --logdir {done.location if args.output is None else args.output}")
    elif args.format == "mlflow":
        configured = os.environ.get("MLFLOW_TRACKING_URI")
        store = folder / "mlruns" if args.output is None else _out_folder(args.output)
        uri = configured if configured and args.output is None else store.resolve().as_uri()
        done = trackers.log_mlflow(series, texts, params, tracking_uri=uri, experiment=args.project, run_name=name,
                                   run_id=args.run_id, start_epoch_s=start)
        print(f"mlflow: run {done.run_id} in {done.location}")
        for skipped in done.skipped:
            print(f"not exported: {skipped}")
    else:
        directory = folder if args.output is None else _out_folder(args.output)
        done = trackers.log_wandb(series, texts, params, directory=directory, project=args.project, run_name=name,
                                  run_id=args.run_id)
        print(f"wandb: run {done.run_id} under {done.location}")
    for group, reason in series.absent:
        print(f"not exported: {group}: {reason}")
    return 0
