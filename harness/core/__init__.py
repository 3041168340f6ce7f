"""harness/core."""
