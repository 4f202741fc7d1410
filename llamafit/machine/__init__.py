"""The devices: DeviceSpec values, the GPU catalog, and detection (NVML, sysfs, sysctl, vulkaninfo,
RPC workers): an edge."""
