"""harness/stats."""
