"""TtT claim check on a synthetic speech proxy (``speech.py``): text -> audio and audio -> text.

Per trial (seed): a k-means codec (32 tokens) is fitted on log-mel frames of training utterances;
two tasks are mixed half and half in one training set, both over a shared vocabulary:

- TTS (interleaved response, two audio spans): ``<tts> <spk> w1 _ w2 | w1 <SOA> a(w1) <EOA> w2 <SOA> a(w2) <EOA> <eos>``
- ASR (input audio span, text response): ``<asr> <SOA> a(w1 w2) <EOA> | w1 _ w2 <eos>``

(``|`` marks where the response, the loss-bearing part, begins). Every arm is the same tiny Llama
(``iclr26.models.tiny``), the same data order, AdamW, the same steps; learning rates of ``ar`` and
``ttt`` are tuned on a validation split from the same 2-value grid (the ablations use TtT's):

- ``ar``: pure AR (causal mask, next-token CE on every response token), greedy decoding;
- ``ar_prefix``: control: AR, but the input audio of ASR is bidirectional (the modality-aware mask
  without the diffusion objective);
- ``ttt``: :class:`TtTLoss` (BANOM, PPM, SST on), :func:`block_diffusion_generate`;
- ``ttt_no_sst`` / ``ttt_no_banom`` / ``ttt_no_ppm``: one strategy switched off.

Per test item: ``tts_edit`` (token edit rate of all generated audio tokens against the reference
rendering's tokens), ``tts_len_err`` (|generated - reference| audio length / reference length),
``asr_cer`` (character error rate of the transcript, spaces included). Reference levels on the same
items: ``rerender`` (a second rendering of the same text by the same speaker with fresh jitter: the
ceiling on ground-truth tokens) and ``wrong_text`` (another test item's reference tokens, transcript:
the text-blind floor).
"""
from __future__ import annotations

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models.tiny import TinyLMConfig, build_tiny_lm

from . import speech
from .generation import ar_generate, block_diffusion_generate
from .objective import TtTLoss

# ---------------------------------------------------------------- vocabulary
PAD, BOS, EOS, UNK, SOA, EOA, MASK, TTS, ASR = range(9)
SPK0 = 9
CHAR0 = SPK0 + len(speech.SPEAKERS)
SPACE = CHAR0 + len(speech.ALPHABET)
AUDIO0 = SPACE + 1
N_CODES = 32
VOCAB = AUDIO0 + N_CODES
AUDIO_IDS = list(range(AUDIO0, VOCAB))

SCALES = {
    "smoke": dict(n_train=120, n_val=8, n_test=8, steps=15, batch=16, hidden=32, layers=2, lr_grid=(3e-3,),
                  tune_steps=10),
    # steps fixed after a one-seed pilot (500 steps: TtT's TTS edit rate 0.83 against AR's 0.43, both
    # learning rates at the top of the (1e-3, 3e-3) grid), within the 15 CPU-minute quick budget
    "quick": dict(n_train=1500, n_val=30, n_test=50, steps=700, batch=32, hidden=64, layers=2,
                  lr_grid=(3e-3, 6e-3), tune_steps=250),
    # the paper fine-tunes Qwen2.5-3B-Base on large interleaved speech-text corpora with GLM-4-Voice
    # tokens; written down for a GPU, not run here
    "paper": dict(n_train=50000, n_val=500, n_test=500, steps=20000, batch=64, hidden=512, layers=8,
                  lr_grid=(3e-4, 1e-3, 3e-3), tune_steps=5000),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}
BLOCK_SIZE, DIFF_STEPS = 8, 4      # our choice for spans of 2-12 tokens (the paper's values not read here)
ARMS = ("ar", "ar_prefix", "ttt", "ttt_no_sst", "ttt_no_banom", "ttt_no_ppm")


def _chars(w):
    return [CHAR0 + speech.ALPHABET.index(c) for c in w]


def _audio(tokens):
    return [AUDIO0 + int(t) for t in tokens]


def tts_sequence(words, speaker, tokens):
    prompt = [BOS, TTS, SPK0 + speaker] + _chars(words[0]) + [SPACE] + _chars(words[1])
    resp = []
    for w, tk in zip(words, tokens):
        resp += _chars(w) + [SOA] + _audio(tk) + [EOA]
    return prompt, resp + [EOS]


def asr_sequence(words, speaker, tokens):
    prompt = [BOS, ASR, SOA] + _audio(np.concatenate(tokens)) + [EOA]
    return prompt, _chars(words[0]) + [SPACE] + _chars(words[1]) + [EOS]


def _draw(rng, n):
    return [([speech.random_word(rng), speech.random_word(rng)], int(rng.integers(len(speech.SPEAKERS))))
            for _ in range(n)]


def build_data(cfg, seed):
    rng = np.random.default_rng(10_000 + seed)
    items = {k: _draw(rng, cfg[f"n_{k}"] * (2 if k == "train" else 1)) for k in ("train", "val", "test")}
    utts = {k: [speech.render(w, s, rng) for w, s in v] for k, v in items.items()}
    codec = speech.KMeansCodec(N_CODES, random_state=seed).fit(
        np.concatenate([f for u in utts["train"][:400] for f in u.frames]))
    for v in utts.values():
        for u in v:
            u.tokens = [codec.encode(f) for f in u.frames]
    # second rendering of each test item (the ceiling) with fresh jitter
    rerender = [speech.render(u.words, u.speaker, rng) for u in utts["test"]]
    for u in rerender:
        u.tokens = [codec.encode(f) for f in u.frames]
    return utts, rerender


def _pack(pairs):
    T = max(len(p) + len(r) for p, r in pairs)
    ids = torch.full((len(pairs), T), PAD, dtype=torch.long)
    lm = torch.zeros_like(ids)
    am = torch.zeros_like(ids)
    for i, (p, r) in enumerate(pairs):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        lm[i, len(p): len(p) + len(r)] = 1
        am[i, : len(p) + len(r)] = 1
    return ids, lm, am


def training_tensors(utts):
    """Half TTS, half ASR, over distinct utterances."""
    pairs = []
    for i, u in enumerate(utts):
        pairs.append((tts_sequence if i % 2 == 0 else asr_sequence)(u.words, u.speaker, u.tokens))
    return _pack(pairs)


ARM_LOSS = {
    "ar": dict(objective="ar"),
    "ar_prefix": dict(objective="ar", bidirectional_input_audio=True),
    "ttt": dict(objective="ttt"),
    "ttt_no_sst": dict(objective="ttt", p_trunc=0.0),
    "ttt_no_banom": dict(objective="ttt", p_mix=0.0),
    "ttt_no_ppm": dict(objective="ttt", p_prefix=0.0),
}


def train_arm(arm, data, cfg, lr, steps, seed):
    seed_everything(seed)
    model = build_tiny_lm(TinyLMConfig(hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
                                       num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=2 * cfg["hidden"]), vocab_size=VOCAB,
                          pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    loss_fn = TtTLoss(MASK, SOA, EOA, PAD, **ARM_LOSS[arm])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    ids, lm, am = data
    g = torch.Generator().manual_seed(seed)        # data order: the same for every arm
    gn = torch.Generator().manual_seed(seed + 1)   # noise draws
    losses = []
    model.train()
    for step in range(steps):
        idx = torch.randint(0, ids.shape[0], (cfg["batch"],), generator=g)
        width = int(am[idx].sum(1).max())
        loss = loss_fn(model, ids[idx, :width], lm[idx, :width], am[idx, :width], generator=gn)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    return model.eval(), losses


def _split(gen):
    """Audio tokens (concatenated over spans) and the text outside spans of a generated response."""
    audio, text, inside = [], [], False
    for t in gen.tolist():
        if t == SOA:
            inside = True
        elif t == EOA:
            inside = False
        elif inside:
            audio.append(t)
        elif t == EOS:
            break
        else:
            text.append(t)
    return audio, text


def evaluate(arm, model, utts, rerender=None):
    kw = dict(soa_id=SOA, eoa_id=EOA, mask_token_id=MASK, eos_token_id=EOS, audio_token_ids=AUDIO_IDS,
              max_new_tokens=40, max_audio_len=32)
    tts = [torch.tensor(tts_sequence(u.words, u.speaker, u.tokens)[0]) for u in utts]
    asr = [torch.tensor(asr_sequence(u.words, u.speaker, u.tokens)[0]) for u in utts]
    if arm.startswith("ttt"):
        g_tts = block_diffusion_generate(model, tts, block_size=BLOCK_SIZE, steps=DIFF_STEPS, **kw)
        g_asr = block_diffusion_generate(model, asr, block_size=BLOCK_SIZE, steps=DIFF_STEPS, **kw)
    else:
        bidir = arm == "ar_prefix"
        g_tts = ar_generate(model, tts, bidirectional_input_audio=bidir, **kw)
        g_asr = ar_generate(model, asr, bidirectional_input_audio=bidir, **kw)
    edit, lerr, cer = [], [], []
    for u, gt, ga in zip(utts, g_tts.sequences, g_asr.sequences):
        ref_audio = _audio(np.concatenate(u.tokens))
        audio, _ = _split(gt)
        edit.append(speech.error_rate(audio, ref_audio))
        lerr.append(abs(len(audio) - len(ref_audio)) / len(ref_audio))
        _, text = _split(ga)
        ref_text = _chars(u.words[0]) + [SPACE] + _chars(u.words[1])
        cer.append(speech.error_rate(text, ref_text))
    return {"tts_edit": edit, "tts_len_err": lerr, "asr_cer": cer,
            "nfe_tts": float(np.mean(g_tts.forward_passes))}


def reference_levels(test, rerender):
    n = len(test)
    edit = {"rerender": [], "wrong_text": []}
    lerr = {"rerender": [], "wrong_text": []}
    cer = {"rerender": [], "wrong_text": []}
    for i, (u, r) in enumerate(zip(test, rerender)):
        ref = np.concatenate(u.tokens)
        other = test[(i + 1) % n]
        for name, hyp in (("rerender", np.concatenate(r.tokens)), ("wrong_text", np.concatenate(other.tokens))):
            edit[name].append(speech.error_rate(list(hyp), list(ref)))
            lerr[name].append(abs(len(hyp) - len(ref)) / len(ref))
        ref_t = u.words[0] + " " + u.words[1]
        cer["rerender"].append(0.0)
        cer["wrong_text"].append(speech.error_rate(other.words[0] + " " + other.words[1], ref_t))
    return edit, lerr, cer


def _score(m):
    return float(np.mean(m["tts_edit"]) + np.mean(m["asr_cer"]))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    utts, rerender = build_data(cfg, seed)
    data = training_tensors(utts["train"])
    # learning rate: validation score (token edit rate + CER) after tune_steps, per family
    chosen, tuning = {}, {}
    for fam in ("ar", "ttt"):
        scores = {}
        for lr in cfg["lr_grid"]:
            model, _ = train_arm(fam, data, cfg, lr, cfg["tune_steps"], seed)
            scores[lr] = _score(evaluate(fam, model, utts["val"]))
        chosen[fam] = min(scores, key=scores.get)
        tuning[fam] = {str(k): v for k, v in scores.items()}
    metrics = {k: {} for k in ("tts_edit", "tts_len_err", "asr_cer")}
    info = {"lr": chosen, "tuning_scores": tuning, "final_loss": {}, "nfe_tts": {}}
    for arm in ARMS:
        lr = chosen["ar" if arm.startswith("ar") else "ttt"]
        model, losses = train_arm(arm, data, cfg, lr, cfg["steps"], seed)
        m = evaluate(arm, model, utts["test"])
        for k in metrics:
            metrics[k][arm] = m[k]
        info["final_loss"][arm] = float(np.mean(losses[-20:]))
        info["nfe_tts"][arm] = m["nfe_tts"]
    edit, lerr, cer = reference_levels(utts["test"], rerender)
    metrics["tts_edit"].update(edit)
    metrics["tts_len_err"].update(lerr)
    metrics["asr_cer"].update(cer)
    return {"metrics": metrics, "info": info}
