"""A SmolVLM-class vision-language model: ``Idefics3ForConditionalGeneration`` (the class of
``HuggingFaceTB/SmolVLM-256M-Instruct``) whose text model is the bundled SmolLM2-135M-Instruct (its
real weights) and whose small SigLIP-style vision tower and connector are trained here on procedural
images (:mod:`iclr26.models.vlm_train`, :mod:`iclr26.data.vision_tasks`).

One load path serves the bundled model, a local folder and (for users with a hub) the real SmolVLM:

>>> model, processor = load_vlm("tiny-vlm", seed=0)                          # doctest: +SKIP
>>> model, processor = load_vlm("HuggingFaceTB/SmolVLM-256M-Instruct")       # doctest: +SKIP
>>> batch = vlm_inputs(processor, [[image]], ["What colour is the shape?"])  # doctest: +SKIP
>>> answers = generate_answers(model, processor, [[image]], ["What colour is the shape?"])  # doctest: +SKIP

Both are ``AutoModelForImageTextToText.from_pretrained`` + ``AutoProcessor.from_pretrained``; the
processor is an ``Idefics3Processor`` (``SmolVLMProcessor`` needs torchvision for its video
processor, which this project does not install). :func:`random_vlm` builds a tiny randomly
initialised model of the same class with a byte-level tokenizer, for tests.

Where things are (``model`` an ``Idefics3ForConditionalGeneration``): the tower
``model.model.vision_model`` (its blocks :func:`vision_layers`), the connector
``model.model.connector`` (pixel shuffle + ``modality_projection``), the text model
``model.model.text_model`` (its blocks :func:`text_layers`); image tokens are the positions where
``input_ids == model.config.image_token_id`` (:func:`image_token_mask`).

Traps: ``get_image_features`` drops an image whose ``pixel_values`` are all exactly 0.0 (it is taken
for padding); ``(image_size / patch_size)`` must be divisible by ``scale_factor``;
``tie_word_embeddings`` must be set for SmolLM2 (which ties), the config default is False.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "HUB_MODEL", "IMAGE_TOKENS", "ROW_COL_TOKENS", "TinyVisionSpec", "DEFAULT_VISION", "byte_tokenizer",
    "add_vlm_tokens", "make_processor", "vlm_config", "random_vlm", "vlm_from_text_model", "load_vlm",
    "save_vlm", "image_token_mask", "vision_layers", "text_layers", "connector", "text_model", "vision_model", "vlm_inputs", "chat_prompt",
    "generate_answers", "hub_config", "image_seq_len", "with_image_splitting",
]

HUB_MODEL = "HuggingFaceTB/SmolVLM-256M-Instruct"
IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>")
#: tile-position tokens the Idefics3 processor inserts when it splits an image (up to 6 x 6 tiles)
ROW_COL_TOKENS = tuple(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7))


def _chat_template() -> str:
    from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE

    return DEFAULT_CHAT_TEMPLATE


class TinyVisionSpec(dict):
    """Keyword arguments of ``Idefics3VisionConfig`` for the tower trained here."""


#: the tower of the bundled tiny VLM: 64 px images, 8 px patches (8 x 8 grid), 4 blocks of width 128,
#: 0.8M parameters; with ``scale_factor`` 2 each image becomes 16 tokens of the text model
DEFAULT_VISION = TinyVisionSpec(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                                image_size=64, patch_size=8)


def image_seq_len(image_size: int, patch_size: int, scale_factor: int) -> int:
    """Image tokens per image (or tile): ``(image_size / patch_size)^2 / scale_factor^2``."""
    side = image_size // patch_size
    if image_size % patch_size or side % scale_factor:
        raise ValueError(
            f"image_size / patch_size = {image_size}/{patch_size} must be an integer divisible by "
            f"scale_factor {scale_factor}"
        )
    return (side // scale_factor) ** 2


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges (256 byte tokens + ``<|endoftext|>``, ``<|im_start|>``,
    ``<|im_end|>``), built in memory: the text side of :func:`random_vlm` (no files, no downloads)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                  pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    return tok


def add_vlm_tokens(tokenizer) -> int:
    """Add the Idefics3 image and tile tokens to ``tokenizer`` (in place; a no-op when present) and
    return the id of ``<image>``."""
    missing = [t for t in IMAGE_TOKENS + ROW_COL_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    return tokenizer.convert_tokens_to_ids("<image>")


def make_processor(tokenizer, *, image_size: int, patch_size: int, scale_factor: int,
                   do_image_splitting: bool = False, split_edge: int | None = None):
    """An ``Idefics3Processor`` for a model whose tower sees ``image_size`` px images.

    Without splitting, every image is resized to ``image_size`` (longest edge) and padded square.
    With ``do_image_splitting``, an image is first resized to ``split_edge`` (longest edge, default
    ``2 * image_size``) and cut into ``image_size`` tiles (each with a ``<row_r_col_c>`` token),
    followed by a global view.
    """
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    add_vlm_tokens(tokenizer)
    edge = int(split_edge or 2 * image_size) if do_image_splitting else image_size
    ip = Idefics3ImageProcessorPil(do_image_splitting=do_image_splitting, size={"longest_edge": edge},
                                   max_image_size={"longest_edge": image_size})
    return Idefics3Processor(image_processor=ip, tokenizer=tokenizer,
                             image_seq_len=image_seq_len(image_size, patch_size, scale_factor),
                             chat_template=_chat_template())


def with_image_splitting(processor, split_edge: int | None = None):
    """A copy of ``processor`` that splits images into tiles of the tower's size (with
    ``<row_r_col_c>`` tokens) plus a global view; ``split_edge`` (default twice the tile size) is the
    longest edge an image is resized to before splitting. The model is unchanged."""
    import copy

    new = copy.deepcopy(processor)
    ip = new.image_processor
    tile = int(ip.max_image_size["longest_edge"])
    ip.do_image_splitting = True
    ip.size = {"longest_edge": int(split_edge or 2 * tile)}
    return new


def vlm_config(text_config, vision: dict, *, scale_factor: int, image_token_id: int, pad_token_id: int | None = None,
               tie_word_embeddings: bool = True):
    """An ``Idefics3Config`` from a text-model config (a ``LlamaConfig`` or its dict) and the tower's
    ``Idefics3VisionConfig`` keyword arguments."""
    from transformers import Idefics3Config, Idefics3VisionConfig

    image_seq_len(vision["image_size"], vision["patch_size"], scale_factor)   # validates the geometry
    text = text_config.to_dict() if hasattr(text_config, "to_dict") else dict(text_config)
    text["tie_word_embeddings"] = tie_word_embeddings
    return Idefics3Config(vision_config=Idefics3VisionConfig(**vision).to_dict(), text_config=text,
                          scale_factor=scale_factor, image_token_id=image_token_id,
                          tie_word_embeddings=tie_word_embeddings,
                          pad_token_id=pad_token_id if pad_token_id is not None else text.get("pad_token_id"))


def random_vlm(seed: int = 0, *, image_size: int = 32, patch_size: int = 8, scale_factor: int = 2,
               vision_hidden: int = 32, vision_layers: int = 2, text_hidden: int = 32, text_layers: int = 2,
               heads: int = 4, kv_heads: int = 2, attn_implementation: str = "eager",
               do_image_splitting: bool = False):
    """``(model, processor)``: a tiny randomly initialised ``Idefics3ForConditionalGeneration`` with
    a byte-level tokenizer, in eval mode (for tests: seconds to build, never trained)."""
    import torch
    from transformers import Idefics3ForConditionalGeneration, LlamaConfig

    tok = byte_tokenizer()
    image_id = add_vlm_tokens(tok)
    text = LlamaConfig(vocab_size=len(tok), hidden_size=text_hidden, intermediate_size=2 * text_hidden,
                       num_hidden_layers=text_layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                       max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    vision = dict(hidden_size=vision_hidden, intermediate_size=2 * vision_hidden, num_hidden_layers=vision_layers,
                  num_attention_heads=heads, image_size=image_size, patch_size=patch_size)
    cfg = vlm_config(text, vision, scale_factor=scale_factor, image_token_id=image_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration._from_config(cfg, attn_implementation=attn_implementation).eval()
    proc = make_processor(tok, image_size=image_size, patch_size=patch_size, scale_factor=scale_factor,
                          do_image_splitting=do_image_splitting)
    _generation_defaults(model, tok)
    return model, proc


def _generation_defaults(model, tok):
    eou = tok.convert_tokens_to_ids("<end_of_utterance>")
    eos = [i for i in (eou, tok.eos_token_id) if i is not None]
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.do_sample = False


def vlm_from_text_model(text_dir: str | os.PathLike, *, vision: dict | None = None, scale_factor: int = 2,
                        seed: int = 0, attn_implementation: str = "eager", do_image_splitting: bool = False):
    """``(model, processor)``: a new ``Idefics3ForConditionalGeneration`` whose text model holds the
    weights of the causal LM saved at ``text_dir`` (e.g. the cached SmolLM2-135M folder), with a
    fresh tower (``vision``, default :data:`DEFAULT_VISION`) and connector drawn from ``seed``.

    The tokenizer gains the image tokens and the embeddings grow to match (mean-initialised; the
    output layer stays tied), except ``<end_of_utterance>``, which starts as the text model's
    end-of-sequence token (:func:`_end_of_utterance_from_eos`); a text-only prompt gives exactly the
    text model's logits.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Idefics3ForConditionalGeneration

    text_dir = str(text_dir)
    tok = AutoTokenizer.from_pretrained(text_dir)
    image_id = add_vlm_tokens(tok)
    text_cfg = AutoConfig.from_pretrained(text_dir)
    vision = dict(vision or DEFAULT_VISION)
    cfg = vlm_config(text_cfg, vision, scale_factor=scale_factor, image_token_id=image_id,
                     pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else text_cfg.pad_token_id,
                     tie_word_embeddings=bool(getattr(text_cfg, "tie_word_embeddings", True)))
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration._from_config(cfg, attn_implementation=attn_implementation)
    lm = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    model.model.text_model.load_state_dict(lm.model.state_dict(), strict=True)
    if not cfg.tie_word_embeddings:
        model.lm_head.weight.data.copy_(lm.lm_head.weight.data)
    del lm
    model.resize_token_embeddings(len(tok), mean_resizing=True)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    _end_of_utterance_from_eos(model, tok)
    proc = make_processor(tok, image_size=vision["image_size"], patch_size=vision["patch_size"],
                          scale_factor=scale_factor, do_image_splitting=do_image_splitting)
    _generation_defaults(model, tok)
    return model.eval(), proc


def _end_of_utterance_from_eos(model, tok):
    """Give ``<end_of_utterance>`` (the token that closes every turn in the SmolVLM chat template) the
    embedding and output row of the text model's own end-of-sequence token (``<|im_end|>`` for
    SmolLM2-Instruct), in place of the mean-initialised row ``resize_token_embeddings`` gave it.

    With a mean row the text model never predicts the token (cross-entropy about 20 nats on it at
    the start of training, inferred from a pilot's starting losses), the frozen output layer cannot
    learn it, and the answer loss is dominated by that one token; initialised from the
    end-of-sequence row it starts at about 1 nat (measured 1.03, 0.71 after 60 connector steps).
    Without an end-of-sequence token nothing changes."""
    import torch

    eou, eos = tok.convert_tokens_to_ids("<end_of_utterance>"), tok.eos_token_id
    if eos is None or eou is None or eou == eos:
        return
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[eou] = emb[eos]
        head = model.get_output_embeddings().weight
        if head.data_ptr() != emb.data_ptr():
            head[eou] = head[eos]


def save_vlm(model, processor, path: str | os.PathLike) -> Path:
    """``save_pretrained`` of model (merged if it is a peft model) and processor into ``path``."""
    path = Path(path)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(str(path))
    processor.save_pretrained(str(path))
    return path


def load_vlm(name: str = "tiny-vlm", *, seed: int = 0, dtype=None, attn_implementation: str | None = "eager",
             device: str = "cpu"):
    """``(model, processor)`` in eval mode, by ``AutoModelForImageTextToText.from_pretrained`` and
    ``AutoProcessor.from_pretrained``.

    ``name``: ``"tiny-vlm"`` (the bundled model of seed ``seed``, built on first use by
    :func:`iclr26.models.vlm_train.prepare_tiny_vlm`, which takes minutes), a local folder, or a hub
    id such as :data:`HUB_MODEL` (needs hub access; nothing here ever downloads on its own).
    ``attn_implementation`` defaults to ``"eager"``, which returns attention maps.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if not isinstance(name, str) or not name:
        raise ValueError("name must be 'tiny-vlm', a local folder or a hub id")
    if name == "tiny-vlm":
        from .vlm_train import prepare_tiny_vlm

        os.environ["HF_HUB_OFFLINE"] = "1"
        path = str(prepare_tiny_vlm(seed=seed))
    elif Path(name).expanduser().exists():
        path = str(Path(name).expanduser())
    elif "/" in name:
        path = name
    else:
        raise ValueError(f"unknown VLM {name!r}: not 'tiny-vlm', not a local folder, not a hub id 'org/name'")
    kw = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    dt = torch.float32 if dtype is None else dtype
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dt, **kw).to(device).eval()
    proc = AutoProcessor.from_pretrained(path)
    return model, proc


# -------------------------------------------------------------------------------------------- access
def image_token_mask(input_ids, model_or_config):
    """Bool tensor, True at the image-token positions of ``input_ids``."""
    cfg = getattr(model_or_config, "config", model_or_config)
    return input_ids == cfg.image_token_id


def vision_layers(model):
    """The tower's encoder blocks (``model.model.vision_model.encoder.layers``)."""
    return _base(model).vision_model.encoder.layers


def text_layers(model):
    """The text model's decoder blocks (``model.model.text_model.layers``)."""
    return _base(model).text_model.layers


def text_model(model):
    """The text model (a ``LlamaModel``): hand it to :mod:`iclr26.models.hooks` functions that look
    for decoder blocks (``zero_heads(text_model(m), mask)``, ``drop_blocks``, ``head_layout``)."""
    return _base(model).text_model


def vision_model(model):
    """The vision tower (``Idefics3VisionTransformer``)."""
    return _base(model).vision_model


def connector(model):
    """The connector (pixel shuffle + linear ``modality_projection``)."""
    return _base(model).connector


def _base(model):
    m = model
    if hasattr(m, "get_base_model"):
        m = m.get_base_model()
    return m.model


# -------------------------------------------------------------------------------------------- prompts
def chat_prompt(processor, question: str, n_images: int = 1, answer: str | None = None) -> str:
    """The chat-template text of one user turn (``n_images`` images, then ``question``), ending with
    ``Assistant:`` (and ``" " + answer + "<end_of_utterance>"`` when ``answer`` is given)."""
    if n_images < 0:
        raise ValueError(f"n_images must be >= 0, got {n_images}")
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": question}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    if answer is not None:
        text = text + " " + answer + "<end_of_utterance>"
    return text


def vlm_inputs(processor, images, questions, answers=None):
    """A padded batch (``input_ids``, ``attention_mask``, ``pixel_values``, ...) for lists of images
    per item and questions (and, for training, answers)."""
    if len(images) != len(questions):
        raise ValueError(f"{len(images)} image lists for {len(questions)} questions")
    texts = [chat_prompt(processor, q, len(ims), None if answers is None else answers[i])
             for i, (ims, q) in enumerate(zip(images, questions))]
    tok = processor.tokenizer
    tok.padding_side = "left"
    has_images = any(len(ims) for ims in images)
    if has_images:
        return processor(text=texts, images=[list(ims) for ims in images], return_tensors="pt", padding=True)
    return processor(text=texts, return_tensors="pt", padding=True)


def generate_answers(model, processor, images, questions, *, max_new_tokens: int = 20, batch_size: int = 16):
    """Greedy answers (stripped strings) to ``questions`` about ``images`` (a list of image lists)."""
    import torch

    out = []
    for i in range(0, len(questions), batch_size):
        batch = vlm_inputs(processor, images[i:i + batch_size], questions[i:i + batch_size])
        with torch.no_grad():
            gen = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, use_cache=True)
        new = gen[:, batch["input_ids"].shape[1]:]
        out.extend(s.strip() for s in processor.batch_decode(new, skip_special_tokens=True))
    return out


def hub_config() -> dict:
    """The architecture fields of :data:`HUB_MODEL`'s ``config.json`` (Idefics3, SmolLM2-135M text
    model, SigLIP-base-512 tower with 16 px patches, scale factor 4: 64 tokens per 512 px tile), for
    tests of the hub path without a download."""
    return {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "image_token_id": 49190,
        "scale_factor": 4,
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
            "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49280,
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000, "pad_token_id": 2,
        },
        "vision_config": {
            "model_type": "idefics3_vision", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
            "num_attention_heads": 12, "image_size": 512, "patch_size": 16, "layer_norm_eps": 1e-6,
        },
    }
