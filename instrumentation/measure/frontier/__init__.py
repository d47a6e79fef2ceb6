"""``aah-viz frontier``: quality against compute for one pretrained model (``run.run_frontier``)."""
