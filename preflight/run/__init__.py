"""One run: plan, coordinate, execute each check in its own process, re-judge recorded facts."""
