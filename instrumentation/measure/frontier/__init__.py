"""``aah-viz frontier``, one job a module: ``plan`` (settings, the text split, the configurations, the
static per-head windows), ``passes`` (the unpatched pass, paired speed, the profile), ``record`` (the
frontier's run directory), ``adaptation`` (the retrofit run of each adapted row) and ``run``
(``run_frontier``, every configuration on the same held-out blocks)."""
