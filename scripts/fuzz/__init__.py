"""Fuzzing and hostile inputs: mutated headers, hostile command lines and HTTP servers."""
