"""Profiling a user's own training code: ``pipeprof profile -- python train.py`` and ``pipeprof.profile()``.

``hooks`` runs inside the user's process (standard library and torch only);
``boot`` starts a script with the hooks installed; ``session`` measures from
outside (the system sampler, the GPU monitor) and turns the recorded events
into a ``Run`` like any scenario run's.
"""
