"""The pipeline below the commands: train a scenario under measurement, derive a run's summary and
report, verify a recommendation by a re-run, run points in fresh processes for sweeps and tuning.

Nothing here parses arguments or prints tables: ``pipeprof.cli`` does that and calls in here; the
Python API (``pipeprof.api``) calls in here too.
"""
