"""The pipeline below the commands: what each command does, without the printing.

  train.py          build a scenario's workload and train it under measurement: a Run of raw records
  derive.py         a Run's summary and its derived files (summary.json, report.html)
  scenario_run.py   run: probe, train, derive, save the run folder; --verify's re-run
  verify.py         the re-run with the top recommendation applied, predicted vs measured
  fresh_process.py  a scenario run in a fresh Python process (verify, sweep points, tune's confirmation)
  sweep.py          a grid of settings, every point in a fresh process; sweep.json, points.csv, sweep.html
  tune.py           the tuner's trials, its ceiling and confirmation; tune.json, tune.html
  diagnose.py       three short runs (compute ceiling, prep only, real) and diagnosis.json
  script_run.py     a user's training script under the hooks, sampled; its run folder
  compare.py        run folders re-derived and compared; compare.json, compare.html
  progress.py       what the pipeline reports while it works (silent by default)

Nothing here parses arguments or prints: ``pipeprof.cli`` does that and calls in here, passing a
``Progress`` that draws on the terminal; the Python API (``pipeprof.api``) calls in here too.
"""
