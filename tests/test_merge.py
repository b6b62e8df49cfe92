"""``pipeprof merge``: the parts of one distributed job, each written on its own node, made one job run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeprof.cli.main import main
from pipeprof.errors import UsageError
from pipeprof.pipeline.merge import merge_folders
from pipeprof.run_folder import SAMPLE_COLUMNS, STEP_COLUMNS, Run, load_run, save_run

N_STEPS, WARMUP = 20, 4


def rank_run(rank: int, world_size: int, node: str, step_s: float, *, job_id: str | None = "job-7",
             wait: float = 0.2, warmup: int = WARMUP, warmup_s: float | None = None) -> Run:
    """One rank's run: ``N_STEPS`` steps, the first ``warmup`` of ``warmup_s`` (default ``step_s``), the
    others of ``step_s``; ``wait`` of each in data wait."""
    step = np.arange(N_STEPS)
    warm = step < warmup
    step_time = np.where(warm, step_s if warmup_s is None else warmup_s, step_s)
    steps = pd.DataFrame({
        "step": step, "epoch": 0, "warmup": warm, "t_start_s": np.cumsum(step_time) - step_time,
        "data_wait_s": wait * step_time, "h2d_s": 0.0, "compute_s": (1 - wait) * step_time, "step_s": step_time,
        "host_wait_s": wait * step_time, "samples": 32, "loss": 1.0, "correct": 10, "ready_batches": np.nan,
        "collective_wait_s": 0.0,
    })[STEP_COLUMNS]
    samples = pd.DataFrame({"t_s": [0.0, 0.5], "cpu_util_pct": 50.0, "main_cpu_pct": 90.0 + rank,
                            "workers_cpu_pct": 0.0, "main_rss_bytes": 1e8, "workers_rss_bytes": 0.0,
                            "tree_rss_bytes": 1e8, "workers": 0, "read_bytes_per_s": 0.0})[SAMPLE_COLUMNS]
    meta = {
        "kind": "script", "status": "complete", "error": None, "notes": [], "device": "cpu", "absences": {},
        "gpu": {"available": False, "reason": "no GPU in use"},
        "scenario": {"name": "train", "loader": {"batch_size": 32, "num_workers": 0}},
        "environment": {"cpu_cores": 4, "torch_threads": 1}, "step_source": "optimizer", "loaders": [],
        "script": {"command_line": "python train.py", "returncode": 0, "exit_status": 0, "wall_s": 3.0},
        "rank": {"rank": rank, "local_rank": rank % 2, "world_size": world_size, "node": node,
                 "node_rank": rank // 2, "pid": 1000 + rank, "backend": "gloo", "status": "complete",
                 "error": None, **({"job_id": job_id} if job_id is not None else {})},
    }
    return Run(meta=meta, steps=steps, samples=samples)


def job_run(ranks: list[Run], node: str, *, job_id: str | None = "job-7", world_size: int = 4) -> Run:
    """A node's part as ``pipeprof profile -- torchrun --nnodes 2 --node_rank K`` writes it: the ranks of the
    world it did not see are untraced there."""
    first = ranks[0]
    meta = {k: v for k, v in first.meta.items() if k != "rank"}
    numbers = [r.meta["rank"]["rank"] for r in ranks]
    elsewhere = [{"pid": None, "cmdline": None, "rank": r, "reason": f"rank {r} of {world_size}: not trained here"}
                 for r in range(world_size) if r not in numbers]
    meta["job"] = {"id": job_id, "world_size": world_size, "ranks": numbers, "nodes": [node], "launcher": "torchrun",
                   "median_rank": numbers[0],
                   "untraced": [{"pid": 99, "cmdline": f"torchrun on {node}", "reason": "the launcher"}, *elsewhere]}
    samples = first.samples.assign(main_cpu_pct=5.0)  # the node's view: the launcher as the main process
    return Run(meta=meta, steps=first.steps, samples=samples, loading=first.loading, ranks=ranks)


def save(run: Run, root: Path, name: str) -> Path:
    return save_run(run, root / name)


def two_nodes(tmp_path: Path, job_id: str = "job-7") -> list[Path]:
    """Ranks 0, 1 on node-a (of job ``job_id``) and 2, 3 on node-b (of job-7)."""
    step_s = {0: 0.11, 1: 0.10, 2: 0.12, 3: 0.30}
    a = job_run([rank_run(r, 4, "node-a", step_s[r], job_id=job_id) for r in (0, 1)], "node-a", job_id=job_id)
    b = job_run([rank_run(r, 4, "node-b", step_s[r]) for r in (2, 3)], "node-b")
    return [save(a, tmp_path, "part-a"), save(b, tmp_path, "part-b")]


def test_two_nodes_parts_merge_into_one_job_of_four_ranks(tmp_path):
    parts = two_nodes(tmp_path)
    merged = merge_folders(parts, out=tmp_path / "reports")
    again = load_run(merged.folder)
    assert [r.meta["rank"]["rank"] for r in again.ranks] == [0, 1, 2, 3]
    job = again.meta["job"]
    assert (job["id"], job["world_size"], job["ranks"], job["nodes"]) == ("job-7", 4, [0, 1, 2, 3],
                                                                          ["node-a", "node-b"])
    assert job["launcher"] == "torchrun" and job["missing_ranks"] == []
    # each node's launcher; not the other node's ranks, which each part lists as not trained on its node
    assert [u["cmdline"] for u in job["untraced"]] == ["torchrun on node-a", "torchrun on node-b"]
    # the lower middle of 0.10 (rank 1), 0.11 (rank 0), 0.12 (rank 2), 0.30 (rank 3): rank 0, not a part's own
    assert job["median_rank"] == 0
    pd.testing.assert_frame_equal(again.steps, again.ranks[0].steps)
    assert set(again.samples["main_cpu_pct"]) == {5.0}  # the first part's system view
    assert any("part-a's only" in n for n in again.meta["notes"])
    assert "rank" not in again.meta and merged.warnings == []
    assert (merged.folder / "report.html").is_file()
    assert json.loads((merged.folder / "summary.json").read_text()) == json.loads(json.dumps(merged.summary))


@pytest.mark.parametrize("step_s, median", [
    ([0.3, 0.1, 0.2, 0.4], 2),  # 0.1 (1), 0.2 (2) | 0.3 (0), 0.4 (3): the lower middle
    ([0.2, 0.1, 0.3, None], 0),  # rank 3 died in its warm-up: no counted step, not the median
])
def test_the_median_rank_is_recomputed_over_every_part(tmp_path, step_s, median):
    runs = [rank_run(r, 4, "n", s or 0.01, warmup=N_STEPS if s is None else WARMUP) for r, s in enumerate(step_s)]
    a = job_run(runs[:2], "node-a")
    b = job_run(runs[2:], "node-b")
    b.meta["job"]["median_rank"] = 3  # each part's own median: not the job's
    merged = merge_folders([save(a, tmp_path, "a"), save(b, tmp_path, "b")], out=tmp_path / "reports")
    assert merged.run.meta["job"]["median_rank"] == median
    pd.testing.assert_frame_equal(merged.run.steps, runs[median].steps)


def test_the_median_rank_leaves_the_warm_up_out(tmp_path):
    """12 warm-up steps of 20: a median over every step would be the warm-up's, and pick rank 1."""
    runs = [rank_run(0, 2, "n", 0.1, warmup=12, warmup_s=1.0), rank_run(1, 2, "n", 0.2, warmup=12, warmup_s=0.01)]
    merged = merge_folders([save(r, tmp_path, f"t{i}") for i, r in enumerate(runs)], out=tmp_path / "reports")
    assert merged.run.meta["job"]["median_rank"] == 0


def test_slurm_tasks_merge_each_a_job_of_one_rank_or_a_rank_run(tmp_path):
    """srun pipeprof profile -- python train.py: each task's folder holds one rank of the world."""
    task_1 = save(job_run([rank_run(1, 3, "node-1", 0.11)], "node-1", world_size=3), tmp_path, "task-1")
    task_0 = save(rank_run(0, 3, "node-0", 0.1), tmp_path, "task-0")
    task_2 = save(job_run([rank_run(2, 3, "node-2", 0.12)], "node-2", world_size=3), tmp_path, "task-2")
    merged = merge_folders([task_1, task_0, task_2], out=tmp_path / "out", name="ddp")
    assert [r.meta["rank"]["rank"] for r in merged.run.ranks] == [0, 1, 2]
    assert merged.run.meta["job"]["nodes"] == ["node-0", "node-1", "node-2"]
    assert merged.run.meta["job"]["median_rank"] == 1
    assert [u["cmdline"] for u in merged.run.meta["job"]["untraced"]] == ["torchrun on node-1", "torchrun on node-2"]
    assert merged.folder.name.endswith("-ddp") and merged.run.name == "ddp"


def test_parts_of_different_jobs_are_refused(tmp_path):
    parts = two_nodes(tmp_path, job_id="job-8")
    with pytest.raises(UsageError, match="not parts of one job: .*part-a and .*part-b record job id 'job-8' and "
                                         "'job-7'"):
        merge_folders(parts, out=tmp_path / "reports")
    assert not (tmp_path / "reports").exists()  # nothing written


def test_different_world_sizes_are_refused(tmp_path):
    a = save(rank_run(0, 2, "a", 0.1), tmp_path, "a")
    b = save(rank_run(1, 4, "b", 0.1), tmp_path, "b")
    with pytest.raises(UsageError, match="record world size 2 and 4"):
        merge_folders([a, b], out=tmp_path / "reports")


def test_a_rank_present_twice_is_refused(tmp_path):
    a, _ = two_nodes(tmp_path)
    again = save(rank_run(1, 4, "node-c", 0.1), tmp_path, "extra")
    with pytest.raises(UsageError, match=r"rank 1 is in .*part-a and in .*extra: give each rank's part once"):
        merge_folders([a, again], out=tmp_path / "reports")


def test_a_missing_rank_is_merged_and_named(tmp_path):
    a = job_run([rank_run(r, 4, "node-a", 0.1) for r in (0, 1)], "node-a")
    b = job_run([rank_run(3, 4, "node-b", 0.1)], "node-b")
    merged = merge_folders([save(a, tmp_path, "a"), save(b, tmp_path, "b")], out=tmp_path / "reports")
    assert merged.run.meta["job"]["ranks"] == [0, 1, 3]
    assert merged.run.meta["job"]["missing_ranks"] == [2]
    assert [u.get("rank") for u in merged.run.meta["job"]["untraced"]] == [None, 2, None]  # rank 2 once
    assert merged.warnings == ["rank 2 of the job's 4 is missing: in none of the merged folders"]
    assert merged.warnings[0] in load_run(merged.folder).meta["notes"]


def test_a_run_without_ranks_is_refused(tmp_path):
    plain = rank_run(0, 1, "a", 0.1)
    del plain.meta["rank"]
    with pytest.raises(UsageError, match="not a run of a rank or of a job"):
        merge_folders([save(plain, tmp_path, "plain")], out=tmp_path / "reports")


def test_parts_without_a_job_id_merge_with_a_note(tmp_path):
    folders = [save(rank_run(r, 2, "a", 0.1, job_id=None), tmp_path, f"t{r}") for r in (0, 1)]
    merged = merge_folders(folders, out=tmp_path / "reports")
    assert merged.run.meta["job"]["id"] is None
    assert merged.warnings == ["no part records a job id: that the parts are of one job was not checked"]


def test_merge_command(tmp_path, capsys):
    parts = two_nodes(tmp_path)
    out = tmp_path / "reports"
    assert main(["merge", *map(str, parts), "--out", str(out), "--name", "job"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "merged: 4 of 4 ranks from 2 folders (median rank 0)"
    folder = Path(printed[-1].removeprefix("report: ")).parent
    assert folder.parent == out and folder.name.endswith("-job")
    assert len(load_run(folder).ranks) == 4
    assert (out / "index.html").is_file()


def test_merge_command_refuses_different_jobs_with_one_line_and_status_2(tmp_path, capsys):
    parts = two_nodes(tmp_path, job_id="job-8")
    assert main(["merge", *map(str, parts), "--out", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipeprof: error: pipeprof merge: not parts of one job")


def test_merge_command_says_which_ranks_are_missing(tmp_path, capsys):
    folders = [save(rank_run(r, 4, "a", 0.1), tmp_path, f"t{r}") for r in (0, 2)]
    assert main(["merge", *map(str, folders), "--out", str(tmp_path / "reports")]) == 0
    assert "note: ranks 1 and 3 of the job's 4 are missing: in none of the merged folders" in capsys.readouterr().out


def test_a_part_at_odds_with_itself_is_refused(tmp_path):
    ranks = [rank_run(0, 2, "a", 0.1, job_id="job-1"), rank_run(1, 2, "a", 0.1, job_id="job-2")]
    folder = save(job_run(ranks, "a", job_id="job-1", world_size=2), tmp_path, "odd")
    with pytest.raises(UsageError, match=r"odd records job id 'job-1' and 'job-2'"):
        merge_folders([folder], out=tmp_path / "reports")


def test_a_rank_outside_the_world_size_is_refused(tmp_path):
    folder = save(job_run([rank_run(0, 2, "a", 0.1)], "a", world_size=2), tmp_path, "a")
    stray = rank_run(1, 2, "b", 0.1)
    stray.meta["rank"]["rank"] = 5
    with pytest.raises(UsageError, match="rank 5 is outside the job's world size 2"):
        merge_folders([folder, save(stray, tmp_path, "b")], out=tmp_path / "reports")


def test_a_failed_part_makes_the_merged_job_failed_and_says_where(tmp_path):
    a, b = two_nodes(tmp_path)
    failed = load_run(b)
    failed.meta["status"], failed.meta["error"] = "failed", "the script exited with status 1"
    b = save(failed, tmp_path, "part-b-failed")
    merged = merge_folders([a, b], out=tmp_path / "reports")
    assert merged.run.meta["status"] == "failed"
    assert merged.run.meta["error"] == f"{b}: the script exited with status 1"
    assert len(merged.run.ranks) == 4
