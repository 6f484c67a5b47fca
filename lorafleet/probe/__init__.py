"""Reading VRAM across the fleet: NVML in-process for local hosts, nvidia-smi over SSH elsewhere."""
