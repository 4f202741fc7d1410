"""Hardware detection (an edge: the core takes DeviceSpec values as parameters)."""

from __future__ import annotations

from .devices import DeviceSpec, host


def detect_host() -> DeviceSpec:
    """Host RAM from psutil: total and available."""
    import psutil

    vm = psutil.virtual_memory()
    return host(int(vm.total), int(vm.available))
