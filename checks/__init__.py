"""Built-in preflight checks, one module per check, registered in pyproject.toml."""
