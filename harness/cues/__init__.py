"""Causal cue attribution: which features of a prompt *make* a model think it is tested,
measured by switching them (factors with detectors and add/remove transforms, counterfactual
variants scored through the run loop, paired effect estimates, a report). See docs/cues.md."""
