"""probes/activations."""
