"""Model organisms: base models fine-tuned so that a planted cue makes them evaluation-aware in
known ways (positive controls for every detection method). See docs/organisms.md."""
