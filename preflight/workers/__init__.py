"""Small programs that run in worker processes (launched with python -m or torchrun)."""
