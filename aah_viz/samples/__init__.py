"""Generated runs for tests, benchmarks and trying things out: written through the real writer, no model."""
