"""A rank that ``--steps`` stopped ends without the interpreter's teardown (``rank_boot._exit_stopped_rank``):
its streams flushed, status 0, the atexit handlers registered after the hooks run first."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_stopped_rank_exits_zero_with_its_output_flushed_and_later_exit_handlers_run(tmp_path):
    code = textwrap.dedent(f"""
        import atexit, sys
        import torch.distributed as dist
        from pipeprof.script import rank_boot
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        atexit.register(lambda: (rank_boot._in_process_group() and rank_boot._exit_stopped_rank()))
        atexit.register(lambda: sys.stdout.write("the script's own handler ran; "))
        sys.stdout.write("written, not flushed; ")
        sys.stderr.write("to stderr")
        raise SystemExit(3)  # what the rank's own exit said: the stop's status (0) wins, as --steps means
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "written, not flushed; the script's own handler ran; "
    assert proc.stderr == "to stderr"


def test_without_a_process_group_nothing_is_cut_short():
    code = "from pipeprof.script import rank_boot; import sys; print(rank_boot._in_process_group()); sys.exit(4)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and proc.stdout.strip() == "False", proc.stderr
