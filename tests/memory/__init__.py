"""Tests of llamafit/memory (and what drives it end to end)."""
