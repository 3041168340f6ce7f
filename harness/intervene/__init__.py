"""`evalaware intervene`: an awareness sentence or its placebo inserted into a run's outputs,
the model continuing, the three conditions compared by sample (:mod:`harness.intervene.conditions`;
the command: :mod:`evalaware.intervene`)."""
