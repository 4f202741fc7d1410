"""Tests of llamafit/machine (and what drives it end to end)."""
