"""harness/data."""
