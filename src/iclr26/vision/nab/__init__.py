"""NAB: Neural Adaptive Binning for sparse-view CT reconstruction (arXiv 2602.02356): the
adaptive-binning coordinate encoding, a random-Fourier baseline encoding, the coordinate INR, a
differentiable parallel-beam projector with FBP, and the reconstruction loop."""
from .encoding import CoordinateINR, NABEncoding, RFFEncoding, pixel_grid
from .projector import ParallelBeamProjector, fbp, radon, ramp_filter
from .reconstruct import NonFiniteTrainingError, Reconstruction, build_inr, psnr, reconstruct

__all__ = ["CoordinateINR", "NABEncoding", "NonFiniteTrainingError", "ParallelBeamProjector", "RFFEncoding",
           "Reconstruction", "build_inr", "fbp", "pixel_grid", "psnr", "radon", "ramp_filter", "reconstruct"]
