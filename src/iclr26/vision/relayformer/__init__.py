"""RelayFormer (arXiv 2508.09459): tiles with global-local relay tokens, relay-global attention with
a LoRA-adapted shared block and axial RoPE, a gated query mask decoder and the BCE + edge-BCE loss."""
from .relay import (GatedMaskDecoder, LoRA, NonFiniteLossError, RelayBlock, RelayConfig, RelayFormer, axial_rope,
                    edge_weight_map, merge_tiles, pixel_f1, relay_loss, split_tiles)
from .splices import load_photos, make_batch, make_splice

__all__ = ["GatedMaskDecoder", "LoRA", "NonFiniteLossError", "RelayBlock", "RelayConfig", "RelayFormer", "axial_rope",
           "edge_weight_map", "load_photos", "make_batch", "make_splice", "merge_tiles", "pixel_f1", "relay_loss",
           "split_tiles"]
