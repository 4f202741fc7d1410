"""The test suite (a package, so that tests import tests.support)."""
