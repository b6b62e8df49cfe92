"""``make gpu-check``: one prepared command that runs every CUDA path of pipeprof and checks its invariants.

``python -m pipeprof.gpu_check --out reports/gpu-check.json`` (several minutes on one GPU): the runs are in
cases.py, the invariants in checks.py, the CUDA-truth checks (training device, no CUDA before the script, no
host sync, side streams, peak memory, NVML per process, DDP on NCCL, --verify) in truth_cases.py and
truth_checks.py, profiling truth_script.py; the runner in runner.py. Without CUDA every check is skipped with
the reason and the command exits 0.
"""
