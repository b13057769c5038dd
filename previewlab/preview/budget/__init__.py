"""The autopilot: what fits the budget, step by step."""
