"""The engine: runs checks on nodes. The runner starts one agent per node through a transport, each
agent runs its checks in child processes under a timeout and streams their results back; the
cluster checks run from the coordinator through the same transports."""
