"""Unlearning-trace detection in LLMs (arXiv:2506.14003): NPO / RMU unlearning and trace detectors."""
from .biographies import Person, answer_is_correct, irrelevant_prompts, make_people, person_examples
from .detector import activation_detector, detection_accuracy, prelogit_activations, text_detector
from .unlearning import (NPO_BETA, RMU_ALPHA, RMU_COEFF, RMU_LAYER, control_vector, gradient_ascent_loss,
                         layer_activations, masked_mse, npo_loss, rmu_loss, rmu_parameters, sequence_logps,
                         unlearning_rows)


def __getattr__(name):
    if name == "UnlearningTrainer":
        from .unlearning import UnlearningTrainer
        return UnlearningTrainer
    raise AttributeError(name)


__all__ = ["Person", "make_people", "person_examples", "irrelevant_prompts", "answer_is_correct",
           "prelogit_activations", "text_detector", "activation_detector", "detection_accuracy",
           "NPO_BETA", "RMU_LAYER", "RMU_COEFF", "RMU_ALPHA", "sequence_logps", "npo_loss", "gradient_ascent_loss",
           "control_vector", "masked_mse", "rmu_loss", "layer_activations", "rmu_parameters", "unlearning_rows",
           "UnlearningTrainer"]
