"""evalaware."""
