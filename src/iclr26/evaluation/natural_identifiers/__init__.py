"""Natural identifiers for privacy and data audits in LLMs (arXiv 2606.24408)."""
from .audit import AuditResult, count_hits, dp_audit_epsilon, hit_bound, hits_tail
from .identifiers import KINDS, find_nids, generate_identifiers
from .inference import FEATURES, DatasetInferenceResult, dataset_inference, mia_features

__all__ = [
    "AuditResult",
    "DatasetInferenceResult",
    "FEATURES",
    "KINDS",
    "count_hits",
    "dataset_inference",
    "dp_audit_epsilon",
    "find_nids",
    "generate_identifiers",
    "hit_bound",
    "hits_tail",
    "mia_features",
]
