"""Tests of llamafit/facts (and what drives it end to end)."""
