"""World2Minecraft (arXiv 2604.27578): occupancy fusion, instance extraction, template snapping,
``/setblock`` export and occupancy IoU / mIoU, with a procedural voxel mini benchmark."""
from .minibench import (FURNITURE, PALETTE, corrupt, deform, majority_filter, make_room, morphological, observe,
                        template_library)
from .voxels import (EMPTY, IGNORE, ROTATIONS, Instances, TemplateFit, dataset_iou, dataset_miou, density,
                     extract_instance_centers, fit_templates, fuse_occupancy, load_occupancy_scene, occupancy_iou,
                     rotate_yaw, semantic_miou, to_setblock_commands)

__all__ = ["EMPTY", "IGNORE", "ROTATIONS", "FURNITURE", "PALETTE", "Instances", "TemplateFit", "corrupt",
           "dataset_iou", "dataset_miou", "deform", "density", "extract_instance_centers", "fit_templates",
           "fuse_occupancy", "load_occupancy_scene", "majority_filter", "make_room", "morphological", "observe",
           "occupancy_iou", "rotate_yaw", "semantic_miou", "template_library", "to_setblock_commands"]
