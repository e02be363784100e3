"""ODPV: PAC verification of the full YOLO pipeline (NMS included) against object disappearance
("Certifying the Full YOLO Pipeline: A Probabilistic Verification Approach", ICLR 2026): scenario-based
output ranges, the formal NMS check inside them, refinement by sample discarding, a DeepPAC-style
comparator, torchvision-style box ops, and the tiny detector of the CPU check."""
from .boxes import box_area, box_iou, interval_box_iou, min_iou_to_box, nms
from .detector import NonFiniteTrainingError, TinyYOLO, train_detector
from .verify import (ODPVResult, certify_nms, deeppac_margin_size, deeppac_output_range, discard_budget, pac_output_range,
                     pac_sample_size, sample_perturbations, scenario_confidence, verify_detection)

__all__ = ["NonFiniteTrainingError", "ODPVResult", "TinyYOLO", "box_area", "box_iou", "certify_nms",
           "deeppac_margin_size", "deeppac_output_range", "discard_budget", "interval_box_iou", "min_iou_to_box", "nms", "pac_output_range",
           "pac_sample_size", "sample_perturbations", "scenario_confidence", "train_detector", "verify_detection"]
