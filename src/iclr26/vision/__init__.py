"""Papers of the vision domain, one sub-package each."""
