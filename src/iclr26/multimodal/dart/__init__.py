"""DART: dual-level optimal transport (instance-level IOT + reliability-weighted UWD) for cross-modal retrieval."""
from .losses import (DARTLoss, InfoNCELoss, IOTLoss, feature_cost, feature_transport_plan, info_nce_loss,
                     iot_loss, reliability_scores, uwd_loss)
from .retrieval import DualEncoder, retrieval_metrics

__all__ = ["DARTLoss", "IOTLoss", "InfoNCELoss", "info_nce_loss", "iot_loss", "reliability_scores",
           "feature_cost", "feature_transport_plan", "uwd_loss", "DualEncoder", "retrieval_metrics"]
