"""Papers of the multimodal domain, one sub-package each."""
