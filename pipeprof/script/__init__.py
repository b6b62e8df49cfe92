"""Profiling a user's own training code: ``pipeprof profile -- python train.py`` and ``pipeprof.profile()``.

``hooks`` runs inside the user's process (standard library and torch only) and
sets every attribute through ``patches``, the one registry that takes them back
(last first, only where the attribute is still pipeprof's); ``batches`` and
``loaders`` are the hooks' wrappers; ``boot`` starts a script with the hooks
installed; ``session`` measures from outside (the system sampler, the GPU
monitor); ``event_file`` reads the hooks' event file into columns and
``event_steps`` cuts it into steps and loading records, a ``Run`` like any
scenario run's.
"""
