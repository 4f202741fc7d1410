"""Tests of llamafit/fit (and what drives it end to end)."""
