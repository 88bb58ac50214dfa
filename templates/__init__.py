"""Jinja2 templates for the HTML and Markdown reports (package data)."""
