"""TtT (From Text to Talk): AR text + absorbing discrete diffusion for audio in one Transformer."""
from .generation import GenerationResult, ar_generate, block_diffusion_generate
from .objective import TtTLoss, TtTTrainer, audio_span_ids, modality_aware_mask
from .speech import KMeansCodec, error_rate, log_mel, synthesize

__all__ = ["TtTLoss", "TtTTrainer", "audio_span_ids", "modality_aware_mask", "block_diffusion_generate",
           "ar_generate", "GenerationResult", "KMeansCodec", "log_mel", "synthesize", "error_rate"]
