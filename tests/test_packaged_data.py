"""The data files shipped inside the package: present, licensed, documented, matched by the
package-data patterns of pyproject.toml, and read by default by the loaders (which still take a
user's directory and say where they looked when a file is missing)."""
from __future__ import annotations

import fnmatch
import gzip
import hashlib
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from iclr26.data.packaged import FILES, packaged_dir

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"hh-rlhf": ("LICENSE", ["harmless-base-test.jsonl.gz"]),
           "heterophilous-graphs": ("LICENCE.txt", [f"{n}.npz" for n in
                                                    ("texas", "cornell", "wisconsin", "chameleon", "squirrel", "actor")])}


def test_files_live_inside_the_package():
    import iclr26
    assert FILES.is_relative_to(Path(iclr26.__file__).resolve().parent)
    assert sorted(p.name for p in FILES.iterdir() if p.is_dir()) == sorted(FOLDERS)


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_each_folder_has_its_licence_source_and_checksums(folder):
    licence, data = FOLDERS[folder]
    d = packaged_dir(folder)
    assert sorted(p.name for p in d.iterdir()) == sorted([licence, "SOURCE.md", *data])
    assert "MIT License" in (d / licence).read_text()
    source = (d / "SOURCE.md").read_text()
    assert "MIT" in source and "github.com/" in source
    for name in data:  # every shipped file is named in SOURCE.md with its sha256
        digest = hashlib.sha256((d / name).read_bytes()).hexdigest()
        assert re.search(rf"{digest}\b.*{re.escape(name)}|{re.escape(name)}.*{digest}", source), name


def test_pyproject_package_data_ships_every_data_file():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    pkg = ROOT / "src" / "iclr26" / "data"
    patterns = cfg["iclr26.data"] + cfg.get("*", [])
    for p in FILES.rglob("*"):
        if p.is_file():
            rel = p.relative_to(pkg).as_posix()
            assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not in the wheel"


def test_hh_loads_from_the_package_and_from_a_directory(tmp_path):
    from iclr26.posttraining.ti_dpo import experiment as exp
    assert exp.DEFAULT_HH_ROOT == packaged_dir("hh-rlhf")
    rows = exp.load_hh()
    assert len(rows) == 2312 and set(rows[0]) == {"chosen", "rejected"}
    with gzip.open(exp.DEFAULT_HH_ROOT / exp.HH_FILE, "rt") as f, gzip.open(tmp_path / exp.HH_FILE, "wt") as g:
        g.write(next(f))
    assert exp.load_hh(tmp_path) == rows[:1]


def test_hh_missing_file_says_where_it_looked(tmp_path, monkeypatch):
    from iclr26.posttraining.ti_dpo import experiment as exp
    with pytest.raises(FileNotFoundError, match="the directory passed as root=") as e:
        exp.load_hh(tmp_path)
    assert str(tmp_path) in str(e.value) and "anthropics/hh-rlhf" in str(e.value)
    monkeypatch.setattr(exp, "DEFAULT_HH_ROOT", tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match="the package's own data") as e:
        exp.load_hh()
    assert str(tmp_path / "gone") in str(e.value)


def test_graphs_load_from_the_package_and_from_a_directory(tmp_path):
    torch = pytest.importorskip("torch")
    from iclr26.architectures.csnn import datasets as ds
    assert ds.DEFAULT_ROOT == packaged_dir("heterophilous-graphs")
    for name in ds.SHIPPED:
        g = ds.load_heterophilous(name)
        z = np.load(ds.DEFAULT_ROOT / f"{name}.npz")
        assert g["x"].shape == z["node_features"].shape and g["train_masks"].shape == (10, g["y"].shape[0])
    shutil.copy(ds.DEFAULT_ROOT / "texas.npz", tmp_path / "texas.npz")
    a, b = ds.load_heterophilous("texas"), ds.load_heterophilous("texas", root=tmp_path)
    assert torch.equal(a["edge_index"], b["edge_index"]) and torch.equal(a["x"], b["x"])


def test_graph_not_shipped_says_where_it_looked(tmp_path):
    pytest.importorskip("torch")
    from iclr26.architectures.csnn import datasets as ds
    with pytest.raises(FileNotFoundError, match="the package's own data") as e:
        ds.load_heterophilous("tolokers")
    msg = str(e.value)
    assert str(ds.DEFAULT_ROOT) in msg and "yandex-research/heterophilous-graphs" in msg and "root=" in msg
    with pytest.raises(FileNotFoundError, match="the directory passed as root=") as e:
        ds.load_heterophilous("texas", root=tmp_path)
    assert str(tmp_path) in str(e.value)
