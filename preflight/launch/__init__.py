"""Starting ranks on nodes: local rank groups, torchrun across nodes, reading their logs, pair schedules."""
