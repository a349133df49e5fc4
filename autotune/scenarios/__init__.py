"""Named scenarios: the seed experiment (seed 004) and plan enumeration for serving targets."""
