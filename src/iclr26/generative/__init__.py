"""Papers of the generative domain, one sub-package each."""
