"""harness/models."""
