"""probes/steering."""
