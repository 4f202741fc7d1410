"""Calibration: what real llama.cpp allocates over a grid, written to fixtures/calibration/."""
