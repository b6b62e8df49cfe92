"""Export a run folder's raw records as a timeline: steps, their phases, each worker's batches, system counters.

--format chrome-trace writes Trace Event Format JSON (default: RUN/trace.json), which
https://ui.perfetto.dev and chrome://tracing open.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeprof.errors import UsageError

FORMATS = ("chrome-trace",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run folder, e.g. reports/20261129T120000Z-quick")
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="chrome-trace: Trace Event Format JSON for Perfetto / chrome://tracing")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="where to write it (default: RUN/trace.json)")


def execute(args: argparse.Namespace) -> int:
    from pipeprof.render.trace import chrome_trace  # pandas loads here, not for --help
    from pipeprof.run_check import refuse_damaged
    from pipeprof.run_folder import load_run, write_text

    folder = Path(args.run)
    run = load_run(folder)
    refuse_damaged(folder, run.damage, "a trace")
    output = args.output if args.output is not None else folder / "trace.json"
    if output.is_dir():
        raise UsageError(f"--output {output}: is a folder (give a file name, e.g. {output / 'trace.json'})")
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: no such folder {output.parent}")
    text = json.dumps(chrome_trace(run), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    try:
        write_text(output, text + "\n")
    except OSError as e:
        raise UsageError(f"--output {output}: cannot write it ({e.strerror or e})") from None
    print(f"trace: {output}")
    print("open it in https://ui.perfetto.dev or chrome://tracing")
    return 0
