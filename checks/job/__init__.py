"""The job's own plan: job.plan."""
