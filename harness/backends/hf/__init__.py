"""harness/backends/hf."""
