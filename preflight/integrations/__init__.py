"""What talks to the team's other systems: Slurm drain and resume, Prometheus alert rules, the training-side monitor."""
