"""canary.training and its figures."""
