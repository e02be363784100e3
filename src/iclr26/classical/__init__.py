"""Papers of the classical domain, one sub-package each."""
