"""Papers of the decoding domain, one sub-package each."""
