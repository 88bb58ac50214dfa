"""versions.pinned, versions.consistency and the pin-file readers."""
