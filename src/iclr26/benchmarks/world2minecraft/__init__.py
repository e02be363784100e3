from .voxels import *
