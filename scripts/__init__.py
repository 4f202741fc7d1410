"""Scripts by purpose (README, "Scripts"): fixtures, bench, audit, calibration, fuzz."""
