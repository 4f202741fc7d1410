"""Audits: real llama.cpp (and the README's first hour) against llamafit, row by row."""
