"""Unlearning-trace detectors (arXiv:2506.14003, Sec. 4 and 5): binary classifiers that tell an
original model's responses from an unlearned model's responses to the same prompts.

* text features: the paper encodes responses with LLM2Vec and trains a 2-layer MLP (Sec. 4.1); here a
  CPU stand-in, TF-IDF character n-grams + logistic regression (:func:`text_detector`);
* activation features: the paper mean-pools the pre-logit activations (the input of the LM head) of
  the generated tokens and trains a classifier on them (Sec. 5); :func:`prelogit_activations` reads
  them through :mod:`iclr26.models.hooks`, :func:`activation_detector` is standardisation + logistic
  regression.

Label convention: 0 = original model, 1 = unlearned model.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from iclr26.models.hooks import record_activations

__all__ = ["prelogit_activations", "text_detector", "activation_detector", "detection_accuracy"]


def prelogit_activations(model, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                         *, batch_size: int = 16, pad_id: int = 0) -> np.ndarray:
    """Mean over the completion tokens of the LM head's input (the final normalised hidden state) when
    ``model`` reads ``prompt + completion``: an array (N, d). The state that predicts completion token
    ``t`` sits at the position before it, so the pooled positions are the last prompt token and every
    completion token but the last. An empty completion pools the last prompt token alone."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token")
    head = model.get_output_embeddings()
    feats = []
    for s in range(0, len(prompt_ids), batch_size):
        P, C = prompt_ids[s:s + batch_size], completion_ids[s:s + batch_size]
        seqs = [list(p) + list(c) for p, c in zip(P, C)]
        T = max(len(x) for x in seqs)
        ids = torch.tensor([x + [pad_id] * (T - len(x)) for x in seqs])
        att = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in seqs])
        sel = torch.zeros(len(seqs), T)
        for i, (p, c) in enumerate(zip(P, C)):
            sel[i, len(p) - 1: len(p) - 1 + max(len(c), 1)] = 1.0
        with torch.no_grad(), record_activations(model, {"h": head}, which="input") as rec:
            model(input_ids=ids, attention_mask=att, use_cache=False)
        h = rec["h"][0].float()
        feats.append(((h * sel.unsqueeze(-1)).sum(1) / sel.sum(1, keepdim=True)).numpy())
    return np.concatenate(feats, axis=0)


def text_detector(C: float = 10.0):
    """TF-IDF (character 2-4-grams inside word boundaries, sublinear tf) + logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    return make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True),
                         LogisticRegression(C=C, max_iter=2000))


def activation_detector(C: float = 1.0):
    """Standardised features + logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))


def detection_accuracy(detector, X_train, y_train, X_test, y_test) -> float:
    """Fit ``detector`` on the training responses and return its accuracy on the test responses.
    Both label sets must hold both classes (0 = original, 1 = unlearned)."""
    for name, y in (("y_train", y_train), ("y_test", y_test)):
        if set(np.unique(np.asarray(y)).tolist()) != {0, 1}:
            raise ValueError(f"{name} must hold both labels 0 (original) and 1 (unlearned), got "
                             f"{sorted(set(np.asarray(y).tolist()))}")
    detector.fit(X_train, np.asarray(y_train))
    return float(np.mean(detector.predict(X_test) == np.asarray(y_test)))
