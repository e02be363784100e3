"""Papers of the compression domain, one sub-package each."""
