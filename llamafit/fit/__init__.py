"""Searching llama-server's flags: the Target, the solver, plan's explanation, ways out, verdict
data, many models, ls rows."""
