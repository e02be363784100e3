"""Papers of the rl domain, one sub-package each."""
