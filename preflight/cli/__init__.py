"""The commands: one module per command; options are defined once in options.py."""
