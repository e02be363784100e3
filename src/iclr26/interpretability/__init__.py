"""Papers of the interpretability domain, one sub-package each."""
