"""preflight: is this cluster ready to train? One go/no-go verdict for a distributed training cluster."""

__version__ = "0.1.0"
