"""Tests of the commands through the CLI (llamafit/cli.py, commands/, report/)."""
