"""Kubernetes: nodes from the API, pods pinned to them for the checks, taints, conditions and labels.

Everything preflight creates carries `app.kubernetes.io/managed-by=preflight` and the run's id
(`preflight.dev/run`), and is deleted at the end of the run.
"""
