"""Measure this machine's ceilings (memory, disk, host-to-device, matmul), cached per machine.

Memory bandwidth, sequential and random 4 KiB disk reads with a cold and a
warm page cache, host-to-device copies from pinned and pageable memory,
float32 matmul throughput at aligned and misaligned sizes, cores and GPUs:
the limits a training pipeline can approach but not beat.

Examples:
  pipeprof probe              print this machine's probe (measured the first time, ~15 s)
  pipeprof probe --refresh    measure again
  pipeprof probe --quick      fewer and smaller repeats: a few seconds
  pipeprof probe --json       the probe as JSON on stdout

The probe is kept as probe-<machine key>.json in the cache folder
($PIPEPROF_CACHE or ~/.cache/pipeprof; --cache DIR); the key hashes the
hostname, CPU model, core counts, RAM and GPU names, so another machine never
reuses it. The disk test writes (and deletes) a file of up to 256 MiB there.

Below the probe: this machine's track record of predictions checked against measurements (every --verify,
tune and sweep adds to it; $PIPEPROF_TRACK_RECORD, else track-record.jsonl in the cache folder). Once a
tier of prediction has 8 checks there, their median error is its intervals' model error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from pipeprof import track_record
from pipeprof.cli.output import stdout_console
from pipeprof.errors import EXIT_INTERRUPTED
from pipeprof.measure.probe_record import ProbeRecord
from pipeprof.render.probe import probe_table, provenance, track_record_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--refresh", action="store_true", help="measure again even if this machine has a cached probe")
    p.add_argument("--quick", action="store_true", help="smaller, fewer repeats: a few seconds instead of ~15")
    p.add_argument("--json", action="store_true", help="print the probe as JSON instead of a table")
    p.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="cache folder (default: $PIPEPROF_CACHE or ~/.cache/pipeprof)")


def execute(args: argparse.Namespace) -> int:
    from pipeprof.measure.probe_cache import load_or_probe  # torch loads here, not for --help
    from pipeprof.run_folder import to_json

    status = Console(stderr=True)
    try:
        with status.status("probing this machine") as spinner:
            probe = load_or_probe(args.cache, refresh=args.refresh, quick=args.quick,
                                  on_stage=lambda stage: spinner.update(f"probing: {stage}"))
    except KeyboardInterrupt:  # the disk test file is already deleted; nothing half-measured is cached
        print("pipeprof: probe interrupted; nothing was cached", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        sys.stdout.write(to_json(probe))
        return 0
    record = ProbeRecord.from_json(probe)  # read once, typed
    console = stdout_console()
    console.print(probe_table(record))
    console.print(Text(provenance(record), style="dim"))
    console.print(Text(track_record_text(track_record.current())))
    return 0
