"""Factorial ablations over seeds: the design file, its trials' state on disk, and the executors that run them.

``design`` parses and expands a design (pure, no torch); ``plan`` says which trials are done, to resume or
new, from the run directories under one logs root; ``executors`` run trials as ``aah-viz train``
subprocesses on this machine, as Ray tasks or as a Slurm job array (Ray and submitit imported only there);
``progress`` is the one progress line of a sweep. ``aah-viz sweep`` (``aah_viz.cli.sweep``) ties them.
"""
