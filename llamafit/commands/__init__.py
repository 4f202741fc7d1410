"""The commands as functions: prepare (the one assembly, with side_load for side models), check,
plan, run, script, router, ls."""
