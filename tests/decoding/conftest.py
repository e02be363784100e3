"""Shared fixtures of the speculative-decoding papers' tests."""
import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

from iclr26.models.speculative import markov_target


def _cached_markov_target(seed, **kw):
    """markov_target(seed, **kw), trained once and kept on disk (deterministic given its arguments
    and the torch version), so repeated test runs (mutation testing) skip the training."""
    key = hashlib.sha256(json.dumps([seed, kw, torch.__version__], sort_keys=True).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / "iclr26-test-fixtures" / f"markov-{key}.pt"
    if path.exists():
        model, text = markov_target(seed, **{**kw, "steps": 1})
        saved = torch.load(path)
        model.load_state_dict(saved["state"])
        model.train_loss = saved["loss"]
        return model, text
    model, text = markov_target(seed, **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    torch.save({"state": model.state_dict(), "loss": model.train_loss}, tmp)
    os.replace(tmp, path)
    return model, text


@pytest.fixture(scope="module")  # one per test module, as each module had before
def trained_markov_target():
    """A tiny Llama trained on a synthetic Markov language (peaked, learned distributions), and the
    language's sampler."""
    torch.set_num_threads(1)
    return _cached_markov_target(0, n_tokens=12, concentration=0.2, steps=100, seq_len=24, hidden_size=32, lr=1e-2)
