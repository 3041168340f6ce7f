"""harness/backends/openai."""
