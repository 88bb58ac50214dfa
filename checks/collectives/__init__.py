"""collectives.local, collectives.cluster, their figures and the nccl-tests reader."""
