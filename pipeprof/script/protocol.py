"""What ``pipeprof profile`` hands the script's process: the names of the environment variables that
``pipeprof.script.boot`` reads there. Standard library only, so the parent names them without importing
torch (it loads torch only once the script has started)."""

# The event file the hooks append to (one JSON array per line).
EVENTS_ENV = "PIPEPROF_EVENTS"
# Optional: end the script after this many training steps.
STEPS_ENV = "PIPEPROF_STEPS"
# Optional: settings changed from outside (``pipeprof profile --loader KEY=VALUE --threads N``), as JSON:
# ``{"loader": [{"loader": NAME|null, "key": KEY, "value": VALUE}], "threads": N|null}`` (script.overrides).
OVERRIDES_ENV = "PIPEPROF_OVERRIDES"
# The folder where every instrumented process of the job writes its own event file (``events-<pid>.jsonl``).
EVENTS_DIR_ENV = "PIPEPROF_EVENTS_DIR"
# The folder put in front of PYTHONPATH whose ``sitecustomize`` arms the hooks in every Python process started
# with this environment (torchrun's ranks, torch.multiprocessing.spawn's, subprocesses): ``pipeprof.script.startup``.
STARTUP_PACKAGE = "startup"
# Optional: cProfile in the script's processes (``pipeprof profile --cprofile [STEPS]``), as JSON:
# ``{"first_step": N, "steps": N, "folder": PATH}`` (``pipeprof.script.code_profile``).
CPROFILE_ENV = "PIPEPROF_CPROFILE"
# Optional: "0" turns off the what-if segments after --steps (``pipeprof profile --no-what-ifs``; verify and
# tune trials): ``pipeprof.script.segments``.
WHAT_IFS_ENV = "PIPEPROF_WHAT_IFS"
# Optional: the what-if segments' total budget in seconds (``pipeprof profile --what-ifs-seconds``); unset: the
# larger of 3 s and 10 % of the run's training (``measure.windows.probes_budget``).
WHAT_IFS_SECONDS_ENV = "PIPEPROF_WHAT_IFS_SECONDS"
