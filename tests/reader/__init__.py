"""Tests of llamafit/reader (and what drives it end to end)."""
