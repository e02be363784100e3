"""Papers of the optimization domain, one sub-package each."""
