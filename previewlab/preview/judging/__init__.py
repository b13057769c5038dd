"""The one analysis: overheads, noise and what to set."""
