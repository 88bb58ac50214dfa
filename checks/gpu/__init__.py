"""gpu.visibility and its judging rules."""
