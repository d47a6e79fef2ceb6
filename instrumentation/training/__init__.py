"""The training loop that ``aah-viz train`` and ``aah-viz retrofit`` both run (``loop.run_loop``),
with its schedule, its stop on SIGTERM and its data-parallel pieces."""
