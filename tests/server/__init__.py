"""Tests of llamafit/server (and what drives it end to end)."""
