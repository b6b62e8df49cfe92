"""pipeprof attach, without a process: py-spy's raw lines, the classes of a stack, shares and their intervals,
the sampled summary, the live frame at 80 columns, and the attach loop driven by a fake recorder."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import schema_errors
from rich.console import Console

from pipeprof.analysis.live_window import LiveWindow, timed_window
from pipeprof.analysis.summary import summary_from_json
from pipeprof.attach.classify import training_class, worker_class
from pipeprof.attach.live import attached_window
from pipeprof.attach.session import record_stacks, stack_rows, unattachable_error
from pipeprof.attach.shares import sampled_shares, wilson
from pipeprof.attach.stacks import Frame, parse_frames, parse_raw, stack_text
from pipeprof.attach.summary import sampled_summary
from pipeprof.errors import UsageError
from pipeprof.pipeline.derive import derived_files, summary_document
from pipeprof.render.live import live_frame
from pipeprof.run_folder import STACK_COLUMNS, STEP_COLUMNS, Run, load_run, save_run, to_json

TORCH = "/venv/lib/python3.11/site-packages/torch"
DL = f"{TORCH}/utils/data/dataloader.py"
LOOP = f"_BaseDataLoaderIter.__next__ ({DL}:725);_MultiProcessingDataLoaderIter._next_data ({DL}:1507)"
WORKER = (f"BaseProcess._bootstrap (/py/multiprocessing/process.py:314);"
          f"_worker_loop ({TORCH}/utils/data/_utils/worker.py:375)")
FETCH = f"_MapDatasetFetcher.fetch ({TORCH}/utils/data/_utils/fetch.py:57)"


def _frames(text: str) -> tuple[Frame, ...]:
    return parse_frames(text)


def raw(pids: list[int], tid: int, name: str, stack: str, count: int) -> str:
    chain = ";".join(f'process {p}:"python train.py --tag a;b"' for p in pids)
    return f"{chain};thread ({tid}): {name};{stack} {count}"


def test_raw_lines_parse_with_a_semicolon_in_the_command_line_and_a_bad_line_counted():
    text = "\n".join([raw([10, 11], 11, "MainThread", f"<module> (/job/train.py:8);{LOOP}", 42),
                      "not a py-spy line", ""])
    stacks, unreadable = parse_raw(text)
    assert unreadable == 1
    (s,) = stacks
    assert (s.pids, s.pid, s.thread_id, s.thread_name, s.samples) == ((10, 11), 11, 11, "MainThread", 42)
    assert s.frames[0] == Frame("<module>", "/job/train.py", 8)
    assert s.frames[-1].function == "_MultiProcessingDataLoaderIter._next_data"
    assert parse_frames(stack_text(s.frames)) == s.frames


@pytest.mark.parametrize(("stack", "line", "klass"), [
    (f"<module> (/job/train.py:8);{LOOP}", "", "data_wait"),
    ("<module> (/job/train.py:12)", "x, y = x.to(device, non_blocking=True), y.cuda()", "h2d"),
    ("<module> (/job/train.py:20)", "running += loss.item()", "device_wait"),
    (f"<module> (/job/train.py:20);synchronize ({TORCH}/cuda/__init__.py:985)", "", "device_wait"),
    (f"<module> (/job/train.py:14);all_reduce ({TORCH}/distributed/distributed_c10d.py:2500)", "", "collective"),
    (f"<module> (/job/train.py:15);Module._call_impl ({TORCH}/nn/modules/module.py:1747)", "", "compute"),
    ("<module> (/job/train.py:30);log (/job/train.py:3)", "print(step)", "other"),
])
def test_training_thread_classes(stack, line, klass):
    assert training_class(_frames(stack), line) == klass


@pytest.mark.parametrize(("below", "expected"), [
    ("Queue.get (/py/multiprocessing/queues.py:113)", ("idle", "")),
    (f"{FETCH};default_collate ({TORCH}/utils/data/_utils/collate.py:398)", ("collate", "")),
    (f"{FETCH};slow_collate (/job/train.py:22)", ("collate", "")),
    (f"{FETCH};<listcomp> ({TORCH}/utils/data/_utils/fetch.py:54);Images.__getitem__ (/job/data.py:40);"
     "open (/venv/lib/python3.11/site-packages/PIL/Image.py:3300)", ("decode", "PIL.Image.open")),
    (f"{FETCH};Images.__getitem__ (/job/data.py:41);Compose.__call__ (/venv/torchvision/transforms/transforms.py:95);"
     "RandomResizedCrop.forward (/venv/torchvision/transforms/transforms.py:970);"
     "Image.convert (/venv/PIL/Image.py:900)", ("transform", "RandomResizedCrop")),
    (f"{FETCH};Images.__getitem__ (/job/data.py:41);Compose.__call__ (/venv/torchvision/transforms/v2/_container.py:50);"
     f"Module._wrapped_call_impl ({TORCH}/nn/modules/module.py:1773);Module._call_impl ({TORCH}/nn/modules/module.py:1784);"
     "ColorJitter.forward (/venv/torchvision/transforms/v2/_color.py:200)", ("transform", "ColorJitter")),
    (f"{FETCH};Images.__getitem__ (/job/data.py:44);_read (/job/data.py:12)", ("fetch", "")),
])
def test_worker_classes_look_below_the_worker_loop_only(below, expected):
    # A forked worker's stack starts with its parent's frames, the DataLoader's __next__ included.
    assert worker_class(_frames(f"<module> (/job/train.py:8);{LOOP};{WORKER};{below}")) == expected


def test_wilson_interval_known_values():
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    assert wilson(0, 0) is None


def _rows(t0: float = 0.0) -> list[dict]:
    """A torchrun job, hand made: the agent (pid 1), two ranks (2, 3), a worker under rank 2 (4) with its
    queue-feeder thread; rank 2 waits for data 3 samples in 4, rank 3 1 in 4."""
    lines = [
        raw([1], 1, "MainThread", "main (/venv/torch/distributed/run.py:900);"
            "_invoke_run (/venv/torch/distributed/elastic/agent/server/api.py:800)", 40),
        raw([1, 2], 2, "MainThread", f"<module> (/job/train.py:8);{LOOP}", 30),
        raw([1, 2], 2, "MainThread", f"<module> (/job/train.py:15);Module._call_impl ({TORCH}/nn/modules/module.py:1)",
            10),
        raw([1, 3], 3, "MainThread", f"<module> (/job/train.py:8);{LOOP}", 10),
        raw([1, 3], 3, "MainThread", f"<module> (/job/train.py:15);Module._call_impl ({TORCH}/nn/modules/module.py:1)",
            30),
        raw([1, 2, 4], 4, "MainThread", f"<module> (/job/train.py:8);{LOOP};{WORKER};{FETCH};slow (/job/t.py:3)", 30),
        raw([1, 2, 4], 4, "MainThread", f"<module> (/job/train.py:8);{LOOP};{WORKER};Queue.get (/py/q.py:1)", 10),
        raw([1, 2, 4], 44, "QueueFeederThread", "Queue._feed (/py/multiprocessing/queues.py:231)", 40),
    ]
    stacks, _ = parse_raw("\n".join(lines))
    return stack_rows(stacks, t0, t0 + 1.0, line_of=lambda f: "")


def test_shares_of_a_torchrun_job_count_its_ranks_not_the_agent_nor_a_workers_feeder_thread():
    shares = sampled_shares(pd.DataFrame(_rows(), columns=STACK_COLUMNS))
    assert shares.training_pids == (2, 3) and shares.other_pids == (1,)
    assert shares.training["data_wait"].samples == 40 and shares.training_samples == 80
    assert shares.fraction("data_wait") == pytest.approx(0.5)
    assert shares.by_process[2]["data_wait"].fraction == pytest.approx(0.75)
    (w,) = shares.workers
    assert (w.pid, w.parent_pid, w.busy.samples, w.busy.of) == (4, 2, 30, 40)
    assert w.parts["collate"].samples == 30


def _attached_run(rows: list[dict]) -> Run:
    return Run(meta={"kind": "script", "status": "complete", "error": None, "absences": {},
                     "notes": ["Sampled: every share of step time in this report is a share of samples"],
                     "scenario": {"name": "attach-1"}, "loaders": [],
                     "script": {"command": ["python", "train.py"], "command_line": "python train.py"},
                     "timing": {"method": "sampled", "parts": dict.fromkeys(("data_wait", "h2d", "compute"), "sampled")}},
               steps=pd.DataFrame(columns=STEP_COLUMNS), stacks=pd.DataFrame(rows, columns=STACK_COLUMNS))


def test_sampled_summary_keeps_the_contract_and_says_what_is_sampled(tmp_path):
    rows = _rows(0.0) + _rows(1.0)
    folder = save_run(_attached_run(rows), tmp_path / "run")
    run = load_run(folder)
    assert len(run.stacks) == len(rows) and not run.damage
    summary, files = derived_files(run, folder.name)
    assert json.loads(files["summary.json"])["timing"]["method"] == "sampled"
    assert schema_errors(json.loads(files["summary.json"])) == []
    page = files["report.html"]
    assert "<svg" in page[page.index("Sampled shares, window by window"):] and "Sampled: every share" in page
    assert summary["fractions"]["data_wait"] == pytest.approx(0.5)
    assert summary["steps"] == 0 and summary["step_time_s"]["median"] is None and summary["samples_per_s"] is None
    assert summary["bottleneck"] == "input" and summary["bottleneck_reason"].endswith("(sampled)")
    assert [r["tier"] for r in summary["recommendations"]] == ["not_predicted"]  # the worker had slack: the negative
    assert "recommendations" not in summary["absences"]
    interval = summary["sampled"]["training"]["data_wait"]["interval"]
    assert interval[0] < 0.5 < interval[1]
    assert [w["t_start_s"] for w in summary["sampled"]["timeline"]] == [0.0, 1.0]
    assert summary["attribution"]["loading"]["workers"] == 1  # the verdict knew the workers were there
    # read back (summary_from_json: the typed sections) and written again, the same summary.json
    assert to_json(summary_document(summary_from_json(json.loads(files["summary.json"])))) == files["summary.json"]


def test_too_few_samples_give_no_verdict():
    rows = [r for r in _rows() if r["pid"] == 3]
    for r in rows:
        r["samples"] = 2
    summary = summary_document(sampled_summary(_attached_run(rows)))
    assert summary["bottleneck"] == "unknown" and "attach for longer" in summary["bottleneck_reason"]


def test_live_frame_fits_80_columns_and_says_what_it_cannot_see():
    window = attached_window(_rows(), window_s=1.0)
    console = Console(record=True, width=80, color_system=None)
    console.print(live_frame(window))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "sampled shares" in text and "worker 4" in text and "25% busy" not in text and "75% busy" in text
    assert "data wait" in text and "50%" in text
    assert "not measured: sampled from outside" in text and "input-bound" in text


def test_live_frame_of_a_timed_window_shows_rates_queue_and_gpu():
    window = LiveWindow(t_end_s=12.0, window_s=1.0, sampled=False, steps_per_s=9.5, samples_per_s=304.0,
                        data_wait_fraction=0.02, h2d_fraction=0.01, compute_fraction=0.97, ready_batches_mean=3.5,
                        queue_capacity_batches=4, worker_busy_fraction={str(i): 0.4 for i in range(12)},
                        gpu_util_pct=91.0, gpu_mem_bytes=6e9)
    console = Console(record=True, width=80, color_system=None)
    console.print(live_frame(window))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "3.5 of 4 batches ready" in text and "+4 workers" in text and "91% busy" in text
    assert "compute-bound" in text and "timed steps" in text


class FakeRecorder:
    """Gives canned raw text per window; raises KeyboardInterrupt (Ctrl-C) at the given window."""

    pyspy = "py-spy"

    def __init__(self, texts: list[str], interrupt_at: int | None = None, clock: list[float] | None = None,
                 interrupt: type[KeyboardInterrupt] = KeyboardInterrupt) -> None:
        self.texts, self.interrupt_at, self.calls = texts, interrupt_at, []
        self.interrupt = interrupt
        self.partial = ""
        self.clock = clock

    def record(self, seconds: int) -> tuple[str, str | None]:
        self.calls.append(seconds)
        if self.clock is not None:
            self.clock[0] += seconds
        text = self.texts[len(self.calls) - 1]
        if len(self.calls) - 1 == self.interrupt_at:
            self.partial = text
            raise self.interrupt
        return text, self.errors[len(self.calls) - 1] if self.errors else None

    errors: list[str | None] = []


LINE = raw([7], 7, "MainThread", f"<module> (/job/train.py:8);{LOOP}", 5)


def test_attach_loop_windows_add_up_to_the_seconds_asked():
    now = [0.0]
    rec = FakeRecorder([LINE] * 5, clock=now)
    out = record_stacks(rec, 7, 12.0, 5, clock=lambda: now[0], t0_s=0.0, alive=lambda pid: True)
    assert rec.calls == [5, 5, 2] and out.windows == 3 and out.status == "complete"
    now[0] = 0.0
    rec = FakeRecorder([LINE] * 5, clock=now)
    record_stacks(rec, 7, 5.6, 5, clock=lambda: now[0], t0_s=0.0, alive=lambda pid: True)
    assert rec.calls == [6]  # no window under a second at the end: the last one takes what is left


def test_ctrl_c_ends_the_attach_and_keeps_the_window_it_interrupted():
    now = [0.0]
    rec = FakeRecorder([LINE] * 5, interrupt_at=1, clock=now)
    out = record_stacks(rec, 7, None, 1, clock=lambda: now[0], t0_s=0.0, alive=lambda pid: True)
    assert out.ended == "ctrl-c" and out.windows == 2 and out.status == "complete"


def test_sigterm_interrupts_the_attach_and_keeps_the_window_it_interrupted():
    from pipeprof.errors import Terminated

    now = [0.0]
    rec = FakeRecorder([LINE] * 5, interrupt_at=1, clock=now, interrupt=Terminated)
    out = record_stacks(rec, 7, None, 1, clock=lambda: now[0], t0_s=0.0, alive=lambda pid: True)
    assert out.ended == "sigterm" and out.windows == 2 and out.status == "interrupted"
    assert out.error is not None and out.error.startswith("terminated (SIGTERM)")


def test_a_process_that_exits_mid_attach_gives_a_partial_run():
    now = [0.0]
    rec = FakeRecorder([LINE, ""], clock=now)
    rec.errors = [None, "Error: No python processes found in process 7 or any of its subprocesses"]
    out = record_stacks(rec, 7, 60.0, 5, clock=lambda: now[0], t0_s=0.0, alive=lambda pid: False)
    assert out.status == "interrupted" and out.ended == "exited" and out.windows == 1 and len(out.rows) == 1
    assert "exited" in (out.error or "")


def test_no_ptrace_permission_says_what_to_do():
    err = unattachable_error(5, "Permission Denied: Try running again with elevated permissions")
    assert isinstance(err, UsageError) and "ptrace_scope" in str(err) and "SYS_PTRACE" in str(err)
    assert "\n" not in str(err)
    other = unattachable_error(5, "Failed to find python version from target process")
    assert "Python interpreter" in str(other)


def test_no_pyspy_says_to_install_it_and_nothing_of_the_process(monkeypatch, capsys, tmp_path):
    import os

    from pipeprof.attach import stacks
    from pipeprof.cli.main import main

    monkeypatch.setattr(stacks, "locate_pyspy", lambda: None)
    assert main(["attach", str(os.getpid()), "--seconds", "1", "-o", str(tmp_path)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "py-spy is not installed" in err and "pip install 'pipeprof[pyspy]'" in err
    assert "Python interpreter" not in err and "pid of the" not in err  # the process is not what is wrong


def test_timed_window_of_a_profiled_script_takes_the_last_second_only():
    steps = pd.DataFrame({c: [] for c in STEP_COLUMNS})
    rows = []
    for i in range(20):  # 0.1 s steps: the first ten wait 0.06 s for data, the last ten 0.02 s
        rows.append({"step": i, "epoch": 0, "warmup": i < 2, "t_start_s": 0.1 * i, "data_wait_s": 0.06 if i < 10 else 0.02,
                     "h2d_s": 0.0, "compute_s": 0.04 if i < 10 else 0.08, "step_s": 0.1, "host_wait_s": 0.0,
                     "samples": 32, "loss": 1.0, "correct": 3, "ready_batches": 1.0 if i < 10 else 3.0,
                     "collective_wait_s": 0.0})
    steps = pd.DataFrame(rows, columns=STEP_COLUMNS)
    loading = pd.DataFrame([{"batch": i, "step": i, "worker": i % 2, "pid": 100 + i % 2, "t_start_s": 0.1 * i,
                             "t_end_s": 0.1 * i + 0.05, "fetch_s": 0.01, "core_wait_s": 0.0, "prep_s": 0.02,
                             "collate_s": 0.01, "samples": 32, "nbytes": 0, "fetch_max_s": 0.001} for i in range(20)])
    w = timed_window(steps, loading, now_s=2.0, window_s=1.0, num_workers=2, prefetch_factor=2,
                     gpu={"gpu_util_pct": 55.0, "gpu_proc_mem_bytes": 2e9})
    assert w.steps_per_s == pytest.approx(10.0) and w.samples_per_s == pytest.approx(320.0)
    assert w.data_wait_fraction == pytest.approx(0.2) and w.compute_fraction == pytest.approx(0.8)
    assert w.ready_batches_mean == pytest.approx(3.0) and w.queue_capacity_batches == 4
    assert w.worker_busy_fraction == {"0": pytest.approx(0.2), "1": pytest.approx(0.2)}
    assert w.gpu_util_pct == 55.0 and not w.sampled and not w.absent
    quiet = timed_window(steps, loading, now_s=10.0, window_s=1.0, gpu_absent="no CUDA device")
    assert quiet.steps_per_s is None and quiet.absent["steps"] and quiet.absent["gpu"] == "no CUDA device"


def test_attached_window_shows_the_trees_gpu_from_the_samplers_last_tick():
    w = attached_window(_rows(), 1.0, {"gpu_proc_util_pct": 73.0, "gpu_proc_mem_bytes": 3e9})
    assert w.gpu_util_pct == 73.0 and w.gpu_mem_bytes == 3e9 and "gpu" not in w.absent
    unmatched = attached_window(_rows(), 1.0, {"gpu_proc_util_pct": float("nan")}, "no GPU sampled")
    assert unmatched.gpu_util_pct is None and unmatched.absent["gpu"] == "no GPU sampled"


def _fake_pyspy(tmp_path, answers: list[tuple[int, str]]):
    """A py-spy whose ``dump`` gives ``answers`` in turn (exit status, stderr), then succeeds; it counts calls."""
    import sys

    script = tmp_path / "py-spy"
    script.write_text(f"#!{sys.executable}\n" + (
        "import pathlib, sys\n"
        f"answers = {answers!r}\n"
        f"count = pathlib.Path({str(tmp_path / 'calls')!r})\n"
        "n = int(count.read_text()) if count.exists() else 0\n"
        "count.write_text(str(n + 1))\n"
        "print('Process 1: python train.py')\n"  # py-spy's header on stdout: never the reason
        "if n < len(answers):\n"
        "    sys.stderr.write(answers[n][1] + '\\n')\n"
        "    sys.exit(answers[n][0])\n"))
    script.chmod(0o755)
    return str(script), lambda: int((tmp_path / "calls").read_text())


def test_a_dump_that_fails_once_is_tried_again_and_a_refusal_is_not(tmp_path):
    # a non-blocking dump reads a running process's memory as it changes: one read can fail, the next not
    import os

    from pipeprof.attach.stacks import Unattachable, check_attachable

    exe, calls = _fake_pyspy(tmp_path, [(1, "Error: Failed to copy PyCodeObject")])
    check_attachable(os.getpid(), exe, pause_s=0.0)
    assert calls() == 2
    (tmp_path / "always").mkdir()
    exe, calls = _fake_pyspy(tmp_path / "always", [(1, "Error: Failed to find python version")] * 5)
    with pytest.raises(Unattachable, match="^Error: Failed to find python version$"):  # its error, not the header
        check_attachable(os.getpid(), exe, pause_s=0.0)
    assert calls() == 3
    (tmp_path / "denied").mkdir()
    exe, calls = _fake_pyspy(tmp_path / "denied", [(1, "Error: Operation not permitted (os error 1)")] * 5)
    with pytest.raises(Unattachable, match="not permitted"):
        check_attachable(os.getpid(), exe, pause_s=0.0)
    assert calls() == 1  # the user must change something: no point asking again
