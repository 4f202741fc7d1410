"""Tests of llamafit/fetch (and what drives it end to end)."""
