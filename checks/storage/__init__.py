"""storage.shared."""
