"""harness/run."""
