"""Image data available offline: Fashion-MNIST from the Debian package, scikit-learn's digits.

Fashion-MNIST is read from ``/usr/share/datasets/fashion-mnist`` (``apt-get install
dataset-fashion-mnist``) or from ``$FASHION_MNIST_DIR``; :func:`fashion_mnist_available` tells
whether it is there, so experiments can fall back to the bundled digits and say so.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

FASHION_DIRS = ("/usr/share/datasets/fashion-mnist",)
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _fashion_dir() -> Path | None:
    for d in ([os.environ["FASHION_MNIST_DIR"]] if os.environ.get("FASHION_MNIST_DIR") else []) + list(FASHION_DIRS):
        if (Path(d) / _FILES["train"][0]).is_file():
            return Path(d)
    return None


def fashion_mnist_available() -> bool:
    return _fashion_dir() is not None


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 (n, 28, 28), labels int64 (n,))`` of the given split ("train" or "test")."""
    if split not in _FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    d = _fashion_dir()
    if d is None:
        raise FileNotFoundError(
            "Fashion-MNIST not found: install it with `apt-get install dataset-fashion-mnist` "
            "or point $FASHION_MNIST_DIR at a folder holding the four idx .gz files"
        )
    img, lab = _FILES[split]
    return _read_idx(d / img), _read_idx(d / lab).astype(np.int64)
