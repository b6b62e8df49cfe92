"""``make gpu-check``: one prepared command that runs every CUDA path of pipeprof and checks its invariants.

``python -m pipeprof.gpu_check --out reports/gpu-check.json`` (about 5 minutes on one GPU): the runs are in
cases.py, the invariants in checks.py, the runner in runner.py. Without CUDA every check is skipped with
the reason and the command exits 0.
"""
