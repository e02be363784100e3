"""AND-OR templates for compositional art and design (ICLR 2026): a max-entropy AND-OR template
classifier learned by penalised block pursuit, and procedural compositions to check it on."""
from .estimator import AndOrTemplate, block_gain, log_partition, moment_match

__all__ = ["AndOrTemplate", "block_gain", "log_partition", "moment_match"]
