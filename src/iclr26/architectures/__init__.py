"""Papers of the architectures domain, one sub-package each."""
