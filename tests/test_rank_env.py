"""A process's rank identity from its launcher's environment (pipeprof.measure.rank_env)."""

import subprocess
import sys

import pytest

from pipeprof.measure.rank_env import IDENTITY_KEYS, job_id, rank_identity


def identity(environ: dict[str, str], host: str = "node-a") -> dict:
    return rank_identity(environ, hostname=lambda: host)


def test_torchrun_with_a_rendezvous_id():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "2", "TORCHELASTIC_RUN_ID": "job-42",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "2"}
    assert identity(env) == {"rank": 5, "local_rank": 1, "world_size": 8, "node": "node-a", "node_rank": 2,
                             "job_id": "job-42", "launcher": "torchrun"}


def test_torchrun_default_run_id_none_is_no_id_the_rendezvous_address_is():
    """torchrun --nnodes 2 --node_rank K --master_addr ...: TORCHELASTIC_RUN_ID is "none" on every job."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "none",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}
    got = identity(env)
    assert got["job_id"] == "127.0.0.1:29511" and got["launcher"] == "torchrun"


def test_slurm_task():
    env = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NODEID": "1",
           "SLURM_JOB_ID": "123456", "SLURMD_NODENAME": "gpu-07"}
    assert identity(env, host="gpu-07.cluster") == {
        "rank": 3, "local_rank": 1, "world_size": 4, "node": "gpu-07", "node_rank": 1, "job_id": "123456",
        "launcher": "slurm"}


def test_torchrun_under_srun_is_torchruns_ranks():
    """srun torchrun ...: the task's SLURM_PROCID is the node's, RANK the process's own."""
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n2",
           "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "none",
           "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
    got = identity(env, host="n2")
    assert (got["rank"], got["world_size"], got["node_rank"], got["launcher"]) == (6, 8, 1, "torchrun")
    assert got["job_id"] == "77"  # the scheduler's job id before the rendezvous address


def test_rank_and_world_size_set_by_hand_have_no_launcher():
    got = identity({"RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "0"})
    assert (got["rank"], got["world_size"], got["node_rank"], got["launcher"], got["job_id"]) == (1, 2, 0, None, None)


def test_a_single_process_has_only_its_node():
    assert identity({}) == {"rank": None, "local_rank": None, "world_size": None, "node": "node-a",
                            "node_rank": None, "job_id": None, "launcher": None}


@pytest.mark.parametrize("env, key", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "rank"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "rank"),
    ({"RANK": "1", "WORLD_SIZE": "0"}, "world_size"),
    ({"RANK": "1", "WORLD_SIZE": "two"}, "world_size"),
    ({"RANK": "4", "WORLD_SIZE": "4"}, "rank"),  # out of range: one of the two is wrong
    ({"RANK": "1", "LOCAL_RANK": "1.5"}, "local_rank"),
    ({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, "rank"),
])
def test_bad_values_are_left_out_not_raised(env, key):
    got = identity(env)
    assert got[key] is None
    assert set(got) == set(IDENTITY_KEYS)
    good = {k: v for k, v in got.items() if k not in (key, "node", "launcher", "job_id") and v is not None}
    assert good  # the other values are still read


def test_job_id_of_an_identity_or_a_rank_meta():
    assert job_id({"job_id": " 123 "}) == "123"
    assert job_id({"job_id": ""}) is None
    assert job_id({"rank": 0}) is None
    assert job_id(None) is None


def test_standard_library_only():
    """Imported inside the user's rank processes: nothing of pipeprof's heavy dependencies loads with it."""
    code = ("import sys, pipeprof.measure.rank_env as r; r.rank_identity(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'numpy', 'psutil')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
