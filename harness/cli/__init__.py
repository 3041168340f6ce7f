"""harness/cli."""
