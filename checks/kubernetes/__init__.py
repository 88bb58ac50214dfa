"""kubernetes.gpus: what NVML counts against what the node offers the scheduler."""
