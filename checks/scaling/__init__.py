"""scaling.multi_gpu and scaling.multi_node."""
