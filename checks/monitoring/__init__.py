"""monitoring.alarms."""
