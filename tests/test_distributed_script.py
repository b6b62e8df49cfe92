"""Multi-process jobs profiled unmodified: torchrun / torch.distributed.run / mp.spawn ranks, each measured.

Ground truth (issue 15 item 8): the ddp_gloo fixture makes one rank's ``__getitem__`` sleep a known time and
every rank prints its own share of step time blocked in ``next()`` (perf_counter). Two ranks on gloo, on CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from support.profiled import STRAGGLER_JOB
from test_profile_script import FIXTURES, profile

from pipeprof.cli.main import main

pytestmark = pytest.mark.integration
DDP = str(FIXTURES / "ddp_gloo.py")
SLOW = ("--slow-rank", "1", "--sleep-ms", "1", "--samples", "640", "--batch-size", "16")  # as in STRAGGLER_JOB


def own_lines(stdout: str) -> dict[int, dict]:
    """Each rank's own JSON line, by rank: found anywhere in the output (the ranks and the launcher share
    stdout, and a line one of them writes in two pieces can have another's inside it)."""
    found = [json.loads(m.group(0)) for m in re.finditer(r'\{"rank": [^{}]*\}', stdout)]
    return {line["rank"]: line for line in found}


def by_rank(summary: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in summary["ranks"]}


@pytest.mark.xdist_group("straggler-job")  # the run test_render_ranks reads too, made once on one worker
def test_torchrun_ranks_are_each_measured_and_the_slow_one_is_the_input_straggler(profiled_runs):
    proc, folder, s, meta = profiled_runs(*STRAGGLER_JOB)
    assert proc.returncode == 0, proc.stderr
    own, ranks = own_lines(proc.stdout), by_rank(s)
    assert sorted(ranks) == [0, 1] and sorted(own) == [0, 1]
    for rank in (0, 1):  # each rank's data wait within 5 points of its own perf_counter
        assert abs(ranks[rank]["fractions"]["data_wait"] - own[rank]["data_wait_fraction"]) < 0.05, (rank, ranks, own)
        assert ranks[rank]["steps"] == 15 and abs(sum(ranks[rank]["fractions"].values()) - 1) < 1e-6
    assert ranks[1]["fractions"]["data_wait"] > 0.6  # the slow shard
    assert ranks[0]["fractions"]["collective_wait"] > 0.5  # the fast rank waits for it in DDP's all-reduce
    assert ranks[0]["fractions"]["collective_wait"] > 5 * ranks[1]["fractions"]["collective_wait"]
    assert s["straggler"]["rank"] == 1 and s["straggler"]["kind"] == "input"
    top = s["recommendations"][0]  # the straggler's own fix first, predicted for the job
    assert top["reason"].startswith("rank 1 (the straggler") and top["change"], s["recommendations"]
    assert s["job"]["median_rank"] in (0, 1) and s["job"]["world_size"] == 2 and s["job"]["launcher"] == "torchrun"
    job = meta["job"]
    assert job["launcher"] == "torchrun" and job["world_size"] == 2 and job["ranks"] == [0, 1]
    assert [u["reason"] for u in job["untraced"]] == ["never iterated a torch.utils.data.DataLoader"]  # torchrun
    assert "torchrun" in " ".join(job["untraced"][0]["cmdline"])
    assert any(n.startswith("pipeprof instrumented 3 Python processes") and "trained as rank 1" in n
               for n in meta["notes"]), meta["notes"]
    assert sorted(p.name for p in (folder / "ranks").iterdir()) == ["rank-0", "rank-1"]
    rank1 = json.loads((folder / "ranks" / "rank-1" / "run.json").read_text())
    assert rank1["rank"]["rank"] == 1 and rank1["rank"]["world_size"] == 2 and rank1["rank"]["backend"] == "gloo"
    steps = pd.read_csv(folder / "ranks" / "rank-0" / "steps.csv")
    assert (steps["collective_wait_s"] <= steps["step_s"]).all() and steps["collective_wait_s"].sum() > 0
    roles = set(pd.read_csv(folder / "processes.csv")["role"])
    assert {"main", "rank"} <= roles  # the launcher and its two ranks
    assert s["samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in s["ranks"]))


@pytest.mark.serial  # each rank's data-wait share held within 5 points of its own timer: not beside other tests
def test_ranks_slowed_alike_name_no_straggler(tmp_path):
    proc, folder, s, meta = profile(tmp_path, "python", DDP, "--world-size", "2", "--sleep-ms", "2",
                                    "--samples", "640", "--batch-size", "16")
    assert proc.returncode == 0, proc.stderr
    own, ranks = own_lines(proc.stdout), by_rank(s)
    assert sorted(own) == [0, 1], proc.stdout
    for rank in (0, 1):
        assert abs(ranks[rank]["fractions"]["data_wait"] - own[rank]["data_wait_fraction"]) < 0.05, (rank, ranks, own)
    assert s["straggler"]["kind"] == "none" and s["straggler"]["rank"] is None, s["straggler"]
    assert meta["job"]["launcher"] == "multiprocessing"


def test_steps_stops_every_spawned_rank_cleanly(tmp_path):
    proc, folder, s, meta = profile(tmp_path, "python", DDP, "--world-size", "2", options=("--steps", "8"))
    assert proc.returncode == 0, proc.stderr
    assert not own_lines(proc.stdout)  # no rank reached its end: each stopped at its 9th next()
    for rank in (0, 1):
        steps = pd.read_csv(folder / "ranks" / f"rank-{rank}" / "steps.csv")
        assert len(steps) == 8
        assert json.loads((folder / "ranks" / f"rank-{rank}" / "run.json").read_text())["script"]["ended"]["how"] \
            == "stopped"
    assert meta["status"] == "complete" and not any("--steps" in n for n in meta["notes"])


def test_a_failing_rank_is_recorded_and_the_others_kept(tmp_path):
    proc, folder, s, meta = profile(tmp_path, "torchrun", "--standalone", "--nproc_per_node", "2", DDP,
                                    "--fail-rank", "1", "--fail-at", "12")
    assert proc.returncode != 0 and folder is not None  # torchrun's own status, passed through
    assert meta["status"] == "failed"
    ranks = by_rank(s)
    assert ranks[1]["status"] == "failed"
    rank1 = json.loads((folder / "ranks" / "rank-1" / "run.json").read_text())["rank"]
    assert "RuntimeError: rank 1 lost its shard at step 12" in rank1["error"]
    assert 0 in ranks and len(pd.read_csv(folder / "ranks" / "rank-0" / "steps.csv")) >= 11  # kept


def test_an_unrecognised_launcher_still_runs_and_its_python_child_is_profiled(tmp_path):
    launcher = tmp_path / "launch.sh"
    launcher.write_text(f"#!/bin/sh\n{sys.executable} {FIXTURES / 'plain_loop.py'} --samples 640 --threads 1\n"
                        "echo launched\n")
    launcher.chmod(0o755)
    proc, folder, s, meta = profile(tmp_path, str(launcher))
    assert proc.returncode == 0, proc.stderr
    assert s["steps"] > 0 and "job" not in meta
    assert any("the training ran in pid" in n for n in meta["notes"])


def test_the_users_own_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "marker"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--",
                           "python", str(FIXTURES / "plain_loop.py"), "--samples", "320"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text().count("ran") >= 1  # the profiled script's interpreter ran the user's too
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["steps"] > 0


def test_a_child_started_without_the_environment_is_said_not_instrumented(tmp_path):
    script = tmp_path / "clean_env.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys
        code = "import torch; from torch.utils.data import DataLoader; [b for b in DataLoader(list(range(64)))]"
        subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"}, check=True)
    """))
    proc, folder, s, meta = profile(tmp_path, "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "pipeprof did not instrument" in meta["absences"]["steps"]
    assert "environment of its own" in meta["absences"]["steps"]


def test_two_node_launches_on_localhost_merge_into_one_job(tmp_path):
    """torchrun --nnodes 2 --node_rank K on one machine: each launch writes its part, merge makes the job."""
    port = str(29500 + os.getpid() % 1000)
    procs = []
    for node in (0, 1):
        out = tmp_path / f"node{node}"
        procs.append((out, subprocess.Popen(
            [sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--", "torchrun",
             "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
             "--master_port", port, DDP, *SLOW], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    parts = []
    for out, p in procs:
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stderr
        parts.append(str(next(f for f in out.iterdir() if f.is_dir())))
    merged = tmp_path / "merged"
    assert main(["merge", *parts, "--out", str(merged)]) == 0
    folder = next(f for f in merged.iterdir() if f.is_dir())
    s = json.loads((folder / "summary.json").read_text())
    assert sorted(r["rank"] for r in s["ranks"]) == [0, 1]
    assert s["straggler"]["rank"] == 1 and s["straggler"]["kind"] == "input"


def test_a_spawned_rank_that_raises_is_recorded_failed_with_its_exception(tmp_path):
    """torch.multiprocessing.spawn catches a rank's exception to hand it to the parent: the rank's own record
    still says what it raised."""
    proc, folder, s, meta = profile(tmp_path, "python", DDP, "--world-size", "2", "--fail-rank", "0",
                                    "--fail-at", "8")
    assert proc.returncode != 0 and folder is not None
    assert meta["status"] == "failed" and "ProcessRaisedException" in meta["error"]
    rank0 = json.loads((folder / "ranks" / "rank-0" / "run.json").read_text())["rank"]
    assert rank0["status"] == "failed" and "RuntimeError: rank 0 lost its shard at step 8" in rank0["error"]


def test_what_ran_names_a_process_by_its_script_module_or_command():
    from pipeprof.script.session import _what_ran
    assert _what_ran(["/py", "/v/bin/torchrun", "--nproc_per_node", "2", "/x/train.py"]) == "torchrun"
    assert _what_ran(["/py", "-u", "/x/train.py", "--lr", "1"]) == "train.py"
    assert _what_ran(["/py", "-u", "-m", "torch.distributed.run", "--standalone"]) == "torch.distributed.run"
    assert _what_ran(["/py", "-c", "from multiprocessing.spawn import spawn_main"]) == "python -c"


def test_spawned_dataloader_workers_are_workers_not_ranks(tmp_path):
    script = tmp_path / "spawn_workers.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        if __name__ == "__main__":
            data = TensorDataset(torch.randn(512, 8), torch.randint(0, 2, (512,)))
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in DataLoader(data, batch_size=16, num_workers=1, multiprocessing_context="spawn"):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    """))
    proc, folder, s, meta = profile(tmp_path, "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "job" not in meta and s["ranks"] == [] and s["steps"] == 27
    assert s["loading"]["batches"] == 27  # the spawned worker armed its own hooks: its batches are timed
    note = next(n for n in meta["notes"] if n.startswith("pipeprof instrumented 2 Python processes"))
    assert "spawn_workers.py: trained" in note and "python -c: its DataLoader worker" in note


def test_a_rank_ended_by_sigterm_keeps_what_it_recorded(tmp_path):
    """torchrun ends the other ranks with SIGTERM when one fails, often within the hooks' half-second between
    writes: the start-up hook's handler writes the event log, then the signal takes its default course."""
    import signal

    import pipeprof
    from pipeprof.script.event_steps import read_events
    from pipeprof.script.protocol import EVENTS_DIR_ENV, STARTUP_PACKAGE

    code = textwrap.dedent("""
        import sys, time
        import torch
        from torch.utils.data import DataLoader
        for i, batch in enumerate(DataLoader(list(range(64)), batch_size=8)):
            pass
        print("ready", flush=True)
        time.sleep(60)
    """)
    root = Path(pipeprof.__file__).resolve().parent
    env = dict(os.environ, **{EVENTS_DIR_ENV: str(tmp_path)},
               PYTHONPATH=os.pathsep.join([str(root / "script" / STARTUP_PACKAGE), str(root.parent)]))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == -signal.SIGTERM  # still ended by the signal
    finally:
        child.kill()
    (path,) = tmp_path.glob("events-*.jsonl")
    events = read_events(path)
    assert len(events.tables["N"]) == 8 and events.start["pid"] == child.pid  # written before it died
    assert events.end is None  # no end record: the run says it was killed
