"""node.environment."""
