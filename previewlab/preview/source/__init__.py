"""Where a step comes from: a step callback, a wrapped scheduler step or a Modular block."""
