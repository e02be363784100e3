"""Papers of the evaluation domain, one sub-package each."""
