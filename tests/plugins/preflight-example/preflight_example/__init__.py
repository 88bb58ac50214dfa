"""Example preflight plugin: checks whose behaviour its parameters choose, for testing the runner."""
