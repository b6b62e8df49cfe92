"""What ``pipeprof profile`` hands the script's process: the names of the environment variables that
``pipeprof.script.boot`` reads there. Standard library only, so the parent names them without importing
torch (it loads torch only once the script has started)."""

# The event file the hooks append to (one JSON array per line).
EVENTS_ENV = "PIPEPROF_EVENTS"
# Optional: end the script after this many training steps.
STEPS_ENV = "PIPEPROF_STEPS"
