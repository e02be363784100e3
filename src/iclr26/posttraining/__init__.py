"""Papers of the posttraining domain, one sub-package each."""
