"""A small from-scratch causal LM and a character/word-level tokenizer, for tasks that need a fully
controlled model (trained in minutes on a CPU) rather than a pretrained one.

The model is an ordinary transformers ``LlamaForCausalLM`` (so ``generate``, KV cache, hooks and
every decoding component written against transformers work on it unchanged); the tokenizer is a
transformers ``PreTrainedTokenizer`` subclass, so it has the usual call interface
(``tok(texts, padding=True, return_tensors="pt")``, ``decode``, ``batch_decode``, ``pad``,
``apply_chat_template`` when a template is set).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

from transformers import PreTrainedTokenizer


@dataclass
class TinyLMConfig:
    """Shape of the tiny Llama. Defaults give ~0.1 M parameters (plus the embedding)."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02

    def __post_init__(self):
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "intermediate_size", "max_position_embeddings"):
            v = getattr(self, k)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"TinyLMConfig.{k} must be a positive integer, got {v!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )


def build_tiny_lm(config: TinyLMConfig | None = None, vocab_size: int = 64, *, pad_token_id: int = 0,
                  bos_token_id: int = 1, eos_token_id: int = 2):
    """A randomly initialised ``LlamaForCausalLM`` of the shape in ``config`` (seed torch first)."""
    import torch  # noqa: F401
    from transformers import LlamaConfig, LlamaForCausalLM

    config = config or TinyLMConfig()
    if not isinstance(vocab_size, int) or vocab_size < 4:
        raise ValueError(f"vocab_size must be an integer >= 4, got {vocab_size!r}")
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        rope_theta=config.rope_theta,
        tie_word_embeddings=config.tie_word_embeddings,
        initializer_range=config.initializer_range,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.bos_token_id = bos_token_id
    return model


_WORD_RE = re.compile(r"\w+|[^\w\s]|\s+")
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class SimpleTokenizer(PreTrainedTokenizer):
    """Character- or word-level tokenizer with the transformers tokenizer interface.

    Ids 0..3 are ``<pad> <bos> <eos> <unk>``; the rest of the vocabulary is the sorted set of
    characters (``level="char"``) or of words, punctuation marks and whitespace runs
    (``level="word"``) of the texts it was built from. Build with :meth:`from_texts`.
    ``decode(encode(s)) == s`` for any ``s`` made of known symbols.
    """

    vocab_files_names = {"vocab_file": "simple_vocab.json"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab: list[str] | None = None, level: str = "char", vocab_file: str | None = None,
                 add_bos: bool = False, **kwargs):
        if level not in ("char", "word"):
            raise ValueError(f"level must be 'char' or 'word', got {level!r}")
        if vocab_file is not None:
            with open(vocab_file) as fh:
                saved = json.load(fh)
            vocab, level = saved["vocab"], saved["level"]
        if vocab is None:
            raise ValueError("SimpleTokenizer needs a vocab (a list of symbols); use SimpleTokenizer.from_texts")
        symbols = list(SPECIALS) + [s for s in vocab if s not in SPECIALS]
        self.level = level
        self.add_bos = add_bos
        self._itos = symbols
        self._stoi = {s: i for i, s in enumerate(symbols)}
        kwargs.setdefault("pad_token", "<pad>")
        kwargs.setdefault("bos_token", "<bos>")
        kwargs.setdefault("eos_token", "<eos>")
        kwargs.setdefault("unk_token", "<unk>")
        super().__init__(**kwargs)

    @classmethod
    def from_texts(cls, texts, level: str = "char", **kwargs) -> "SimpleTokenizer":
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of strings, not a single string")
        symbols: set[str] = set()
        for t in texts:
            symbols.update(t if level == "char" else _WORD_RE.findall(t))
        return cls(sorted(symbols), level=level, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self._itos)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._stoi)

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return list(text) if self.level == "char" else _WORD_RE.findall(text)

    def _convert_token_to_id(self, token: str) -> int:
        return self._stoi.get(token, self._stoi["<unk>"])

    def _convert_id_to_token(self, index: int) -> str:
        return self._itos[index] if 0 <= index < len(self._itos) else "<unk>"

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        ids = list(token_ids_0) + (list(token_ids_1) if token_ids_1 else [])
        return ([self.bos_token_id] + ids) if self.add_bos else ids

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None):
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "simple_vocab.json")
        with open(path, "w") as fh:
            json.dump({"vocab": self._itos[len(SPECIALS):], "level": self.level}, fh)
        return (path,)


def config_dict(config: TinyLMConfig) -> dict:
    return asdict(config)


#: the symbols of the procedural arithmetic prompts (``iclr26.data.math``) and of "Q: ...\nA:" framing
ARITHMETIC_ALPHABET = "0123456789+-*/=.,? abcdefghijklmnopqrstuvwxyz\nWQA:"


def random_char_lm(seed: int = 0, alphabet: str = ARITHMETIC_ALPHABET, num_hidden_layers: int = 2,
                   hidden_size: int = 32):
    """``(model, tokenizer)``: a randomly initialised tiny Llama (seeded with ``seed``) over a
    character tokenizer of ``alphabet``, in eval mode. The stand-in the decoding components use for
    smoke runs and unit tests, where only the mechanics matter, not what the model says."""
    import torch

    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(f"alphabet must be a non-empty string, got {alphabet!r}")
    tok = SimpleTokenizer.from_texts([alphabet], level="char")
    torch.manual_seed(seed)
    cfg = TinyLMConfig(hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=num_hidden_layers)
    model = build_tiny_lm(cfg, len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id)
    return model.eval(), tok
