"""An attached run's recommendations, from hand-made stacks (no process): the kinds a profiled run gets, each at
the not_predicted tier, from the sampled shares, the loader's settings the stacks show and the cores sampled."""

from __future__ import annotations

import json

import pandas as pd
from conftest import schema_errors
from rich.console import Console
from test_attach_analysis import FETCH, LOOP, TORCH, WORKER, raw

from pipeprof.analysis.change_model import PREDICTABLE_KEYS
from pipeprof.analysis.transform_advice import DECODE_IN_RAM_CODE, DECODE_JPEG_CODE
from pipeprof.attach.loader_read import PREFETCH_UNREADABLE, read_loader
from pipeprof.attach.session import stack_rows
from pipeprof.attach.shares import sampled_shares
from pipeprof.attach.stacks import parse_raw
from pipeprof.attach.summary import sampled_summary
from pipeprof.pipeline.derive import summary_document
from pipeprof.render.advice_text import code_text
from pipeprof.render.console import print_summary
from pipeprof.run_folder import SAMPLE_COLUMNS, STACK_COLUMNS, STEP_COLUMNS, Run

MAIN = 10
COMPUTE = f"<module> (/job/train.py:15);Module._call_impl ({TORCH}/nn/modules/module.py:1)"
H2D = "<module> (/job/train.py:12);send_to_device (/venv/accelerate/utils/operations.py:150)"
PIN = "_pin_memory_loop (" + TORCH + "/utils/data/_utils/pin_memory.py:50);Queue.get (/py/queue.py:180)"
PIL_DECODE = (f"{FETCH};<listcomp> ({TORCH}/utils/data/_utils/fetch.py:54);Images.__getitem__ (/job/data.py:40);"
              "open (/venv/lib/python3.11/site-packages/PIL/Image.py:3300)")
READ = f"{FETCH};<listcomp> ({TORCH}/utils/data/_utils/fetch.py:54);Images.__getitem__ (/job/data.py:44)"
IDLE = "Queue.get (/py/multiprocessing/queues.py:113)"


def job(wait: int, compute: int, *, h2d: int = 0, workers: tuple[tuple[int, int, int], ...] = (),
        pin_thread: bool = False) -> pd.DataFrame:
    """One training process (pid 10) sampled ``wait`` / ``compute`` / ``h2d`` times, and one worker per
    ``(decode, read, idle)`` sample counts under it."""
    lines = [raw([MAIN], MAIN, "MainThread", f"<module> (/job/train.py:8);{LOOP}", wait),
             raw([MAIN], MAIN, "MainThread", COMPUTE, compute)]
    if h2d:
        lines.append(raw([MAIN], MAIN, "MainThread", H2D, h2d))
    if pin_thread:
        lines.append(raw([MAIN], MAIN + 1, "pt_data_pin", PIN, wait + compute + h2d))
    for i, (decode, read, idle) in enumerate(workers):
        pid, stack = MAIN + 10 + i, f"<module> (/job/train.py:8);{LOOP};{WORKER}"
        for below, count in ((PIL_DECODE, decode), (READ, read), (IDLE, idle)):
            if count:
                lines.append(raw([MAIN, pid], pid, "MainThread", f"{stack};{below}", count))
    stacks, _ = parse_raw("\n".join(lines))
    return pd.DataFrame(stack_rows(stacks, 0.0, 10.0, line_of=lambda f: ""), columns=STACK_COLUMNS)


def attached(stacks: pd.DataFrame, *, cores: int = 16, tree_pct: float | None = None, machine_pct: float = 0.0,
             device: str = "cpu", ended: str = "seconds") -> Run:
    """An attached run of ``stacks`` on a machine of ``cores`` cores, the tree using ``tree_pct`` % of one core
    (None: no CPU samples) and the machine ``machine_pct`` % of all."""
    samples = pd.DataFrame(columns=SAMPLE_COLUMNS)
    if tree_pct is not None:
        samples = pd.DataFrame([{"t_s": t / 2, "main_cpu_pct": 100.0, "workers_cpu_pct": tree_pct - 100.0,
                                 "cpu_util_pct": machine_pct} for t in range(20)], columns=SAMPLE_COLUMNS)
    return Run(meta={"kind": "script", "status": "complete" if ended != "exited" else "interrupted", "error": None,
                     "absences": {}, "notes": [], "scenario": {"name": "attach-10"}, "loaders": [], "device": device,
                     "gpu": {"available": device != "cpu"}, "environment": {"cpu_cores": cores},
                     "script": {"command": ["python", "train.py"], "command_line": "python train.py"},
                     "attach": {"ended": ended, "sampled_s": 10.0},
                     "timing": {"method": "sampled", "parts": dict.fromkeys(("data_wait", "h2d", "compute"), "sampled")}},
               steps=pd.DataFrame(columns=STEP_COLUMNS), samples=samples, stacks=stacks)


def recs(run: Run) -> list[dict]:
    summary = summary_document(sampled_summary(run))
    assert schema_errors(summary) == []
    out = summary["recommendations"]
    for r in out:  # never a number: nothing was timed
        assert r["tier"] == "not_predicted" and r["predicted_speedup"] is None
        assert r["predicted_samples_per_s"] is None and r["interval"]["speedup"] is None
        assert set(r["change"]) <= PREDICTABLE_KEYS
    return out


def test_no_workers_and_a_long_wait_get_the_fewest_workers_that_keep_up():
    # 75% waiting: the process makes a batch in 3 units and computes in 1, so 3 workers keep up
    (top,) = recs(attached(job(wait=300, compute=100), tree_pct=100.0))
    assert top["change"] == {"loader.num_workers": 3}
    assert "⌈0.75 / 0.25⌉ = 3 workers" in top["reason"] and "pipeprof profile --verify" in top["reason"]


def test_busy_workers_get_more_as_far_as_the_idle_cores_allow():
    stacks = job(wait=200, compute=200, workers=((0, 95, 5), (0, 95, 5)))  # busy 0.95, wait 0.5: 2 x 0.95 / 0.5
    (top,) = recs(attached(stacks, cores=16, tree_pct=300.0))
    assert top["change"] == {"loader.num_workers": 4}
    (capped,) = recs(attached(stacks, cores=4, tree_pct=300.0))  # one core idle: one more worker at most
    assert capped["change"] == {"loader.num_workers": 3} and "at most 3" in capped["reason"]
    (full,) = recs(attached(stacks, cores=4, tree_pct=390.0))  # the cores are busy: the honest negative
    assert full["change"] == {} and "more workers will not help" in full["reason"]
    # workers that wait on storage (0.05 cores each) still fit in 0.4 idle cores of a busy machine
    (waiting,) = recs(attached(stacks, cores=4, tree_pct=110.0, machine_pct=90.0))
    assert waiting["change"] == {"loader.num_workers": 4} and "a worker kept 0.05 busy" in waiting["reason"]
    (unknown,) = recs(attached(stacks, cores=16, tree_pct=None))  # no CPU samples: said, not assumed
    assert unknown["change"] == {"loader.num_workers": 4} and "not sampled" in unknown["reason"]


def test_workers_with_slack_get_no_more_workers():
    (top,) = recs(attached(job(wait=200, compute=200, workers=((0, 50, 50),)), tree_pct=150.0))
    assert top["change"] == {} and "busy only 50%" in top["reason"]


def test_decode_that_dominates_the_workers_gets_the_decode_changes():
    stacks = job(wait=200, compute=200, workers=((80, 15, 5), (80, 15, 5)))  # decode 80/95 of busy
    out = recs(attached(stacks, cores=4, tree_pct=390.0))  # no core left: no workers, the code changes still
    assert [r["code_change"] for r in out] == [code_text(DECODE_IN_RAM_CODE), code_text(DECODE_JPEG_CODE)]
    assert "PIL.Image.open" in out[0]["reason"] and "84%" in out[0]["reason"]


def test_pin_memory_only_on_a_gpu_and_only_where_no_pinning_was_seen():
    stacks = job(wait=20, compute=300, h2d=80, workers=((0, 10, 90),))
    assert recs(attached(stacks, device="cuda:0", tree_pct=150.0))[0]["change"] == {"loader.pin_memory": True}
    assert recs(attached(stacks, device="cpu", tree_pct=150.0))[0]["change"] == {}
    pinned = job(wait=20, compute=300, h2d=80, workers=((0, 10, 90),), pin_thread=True)
    assert recs(attached(pinned, device="cuda:0", tree_pct=150.0))[0]["change"] == {}


def test_a_compute_bound_job_gets_the_negative_and_too_few_samples_get_nothing():
    (top,) = recs(attached(job(wait=4, compute=396), tree_pct=100.0))
    assert top["change"] == {} and "compute-bound" in top["reason"]
    summary = summary_document(sampled_summary(attached(job(wait=10, compute=10), tree_pct=100.0)))
    assert summary["recommendations"] == [] and "attach for longer" in summary["absences"]["recommendations"]


def test_a_process_that_exited_mid_attach_says_so_on_every_recommendation():
    out = recs(attached(job(wait=300, compute=100), tree_pct=100.0, ended="exited"))
    assert out and all("exited during the attach" in r["note"] for r in out)


def test_the_loader_read_from_the_stacks_and_what_cannot_be_read():
    stacks = job(wait=50, compute=50, workers=((0, 10, 0),) * 3, pin_thread=True)
    loader = read_loader(stacks, sampled_shares(stacks))
    assert (loader.num_workers, loader.pin_memory, loader.prefetch_factor) == (3, True, None)
    assert loader.absent == {"prefetch_factor": PREFETCH_UNREADABLE}
    alone = job(wait=50, compute=50)
    loader = read_loader(alone, sampled_shares(alone))
    assert (loader.num_workers, loader.pin_memory) == (0, None) and "num_workers = 0" in loader.absent["pin_memory"]
    summary = summary_document(sampled_summary(attached(stacks, tree_pct=100.0)))
    assert summary["sampled"]["loader"]["num_workers"] == 3
    assert summary["absences"]["loader.prefetch_factor"] == PREFETCH_UNREADABLE  # said where the report lists


def test_the_terminal_shows_the_top_recommendation_as_not_predicted(tmp_path):
    summary = json.loads(json.dumps(summary_document(sampled_summary(attached(job(wait=300, compute=100), tree_pct=100.0)))))
    console = Console(width=200, record=True, color_system=None)
    print_summary(summary, tmp_path, console)
    text = console.export_text()
    line = text[text.index("top recommendation"):]
    assert "num_workers" in line and "not predicted" in line
