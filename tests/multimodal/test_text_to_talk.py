"""Tests of text_to_talk (TtT): mask, loss, strategies, generation, the speech proxy, the experiment."""
import math

import numpy as np
import pytest
import torch

from iclr26.models.tiny import TinyLMConfig, build_tiny_lm
from iclr26.multimodal.text_to_talk import (TtTLoss, TtTTrainer, ar_generate, audio_span_ids,
                                            block_diffusion_generate, error_rate, modality_aware_mask)
from iclr26.multimodal.text_to_talk import experiment, speech
from iclr26.multimodal.text_to_talk.objective import lambda_weight_mean

PAD, SOA, EOA, MASK, EOS = 0, 4, 5, 6, 2
AUDIO = list(range(30, 40))


def tiny(vocab=40, layers=2, seed=0):
    torch.manual_seed(seed)
    return build_tiny_lm(TinyLMConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64), vocab_size=vocab)


# text  <SOA> a a a <EOA> text <SOA> a a <EOA> <eos>
SEQ = torch.tensor([[1, 10, 4, 30, 31, 32, 5, 11, 4, 33, 34, 5, 2]])
LM = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])


# ------------------------------------------------------------------ mask (equation: Sec. 3 modality-aware attention)
def test_span_ids():
    assert audio_span_ids(SEQ, SOA, EOA).tolist() == [[-1, -1, 0, 0, 0, 0, 0, -1, 1, 1, 1, 1, -1]]
    open_span = torch.tensor([[1, 4, 30, 6, 6]])
    assert audio_span_ids(open_span, SOA, EOA).tolist() == [[-1, 0, 0, 0, 0]]


def test_mask_against_loop_reference():
    spans = audio_span_ids(SEQ, SOA, EOA)[0]
    m = modality_aware_mask(spans[None])[0, 0]
    T = len(spans)
    for q in range(T):
        for k in range(T):
            ref = k <= q or (spans[q] >= 0 and spans[q] == spans[k])
            assert bool(m[q, k]) == ref, (q, k)


def test_mask_reduces_to_causal_without_audio():
    spans = torch.full((2, 7), -1)
    m = modality_aware_mask(spans)
    assert torch.equal(m[0, 0], torch.tril(torch.ones(7, 7, dtype=torch.bool)))


def test_mask_hides_padding_keys_but_keeps_self():
    spans = torch.full((1, 4), -1)
    m = modality_aware_mask(spans, torch.tensor([[1, 1, 0, 0]]))[0, 0]
    assert not m[3, 2] and m[3, 3] and m[1, 0] and not m[1, 2]


def test_mask_changes_only_span_positions_in_first_layer():
    model = tiny(layers=1)
    spans = audio_span_ids(SEQ, SOA, EOA)
    a = model(input_ids=SEQ, attention_mask=modality_aware_mask(spans)).logits
    c = model(input_ids=SEQ).logits
    diff = (a - c).abs().amax(-1)[0]
    # positions whose row differs from the causal one: inside spans, not the last token of a span
    assert diff[0] == 0 and diff[1] == 0 and diff[6] == 0 and diff[7] == 0
    assert diff[2] > 0 and diff[8] > 0


# ------------------------------------------------------------------ loss
def test_ar_objective_equals_shifted_cross_entropy():
    model = tiny()
    loss = TtTLoss(MASK, SOA, EOA, objective="ar")(model, SEQ, LM)
    logits = model(input_ids=SEQ).logits
    ref = torch.nn.functional.cross_entropy(logits[0, :-1][LM[0, 1:].bool()], SEQ[0, 1:][LM[0, 1:].bool()])
    assert torch.allclose(loss, ref, atol=1e-5)


def test_ttt_with_no_noise_is_text_cross_entropy_under_the_mask():
    """BANOM batch (p_mix = 1): audio clean, loss = CE of the text-side targets / all targets."""
    model = tiny()
    L = TtTLoss(MASK, SOA, EOA, p_mix=1.0, p_prefix=0.0, p_trunc=0.0)
    loss = L(model, SEQ, LM)
    spans = audio_span_ids(SEQ, SOA, EOA)
    logits = model(input_ids=SEQ, attention_mask=modality_aware_mask(spans)).logits[0, :-1]
    tgt = SEQ[0, 1:]
    diffusable = (spans[0, 1:] >= 0) & (tgt != SOA)
    text = LM[0, 1:].bool() & ~diffusable
    ce = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
    assert torch.allclose(loss, ce[text].sum() / LM[0, 1:].sum(), atol=1e-5)
    assert L.last_stats["clean_batch"] == 1.0 and L.last_stats["audio_loss"] == 0.0


class _Record(torch.nn.Module):
    """Records its inputs; returns fixed logits (uniform over the vocabulary)."""

    def __init__(self, vocab=40):
        super().__init__()
        self.vocab, self.calls = vocab, []
        self.w = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None):
        self.calls.append((input_ids.clone(), attention_mask))
        out = torch.zeros(*input_ids.shape, self.vocab) + self.w

        class O:
            logits = out
        return O


def test_diffusion_term_is_inverse_lambda_weighted():
    """Uniform logits: every CE is log V; masked audio gets weight 1/lambda, text weight 1."""
    torch.manual_seed(0)
    B = 4000
    seq = SEQ.repeat(B, 1)
    lm = LM.repeat(B, 1)
    L = TtTLoss(MASK, SOA, EOA, p_mix=0.0, p_prefix=0.0, p_trunc=0.0, min_lambda=0.05)
    g = torch.Generator().manual_seed(1)
    loss = L(_Record(), seq, lm, generator=g)
    n_audio = 7            # 3 + <EOA>, 2 + <EOA> per row
    n_target = 12
    # E[#masked / lambda] = n_audio * E[lambda / max(lambda, eps)] ~ n_audio * (1 - eps / 2)
    expected = math.log(40) * ((n_target - n_audio) + n_audio * (1 - 0.05 / 2)) / n_target
    assert abs(float(loss) - expected) < 0.03 * expected
    assert lambda_weight_mean(0.05) == pytest.approx(1 + math.log(20))


def test_only_target_audio_is_masked_and_text_untouched():
    rec = _Record()
    asr = torch.tensor([[1, 8, 4, 30, 31, 32, 5, 11, 12, 2]])
    lm = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 1, 1, 1]])
    L = TtTLoss(MASK, SOA, EOA, p_mix=0.0, p_prefix=0.0, p_trunc=0.0)
    for s in range(20):
        L(rec, asr, lm, generator=torch.Generator().manual_seed(s))
    assert all(torch.equal(ids, asr) for ids, _ in rec.calls)          # input audio never noised
    rec.calls.clear()
    for s in range(50):
        L(rec, SEQ, LM, generator=torch.Generator().manual_seed(s))
    seen = torch.stack([ids[0] for ids, _ in rec.calls])
    masked = seen == MASK
    text_pos = [0, 1, 2, 7, 8, 12]                                        # text, <SOA>
    assert not masked[:, text_pos].any() and masked.any()
    assert masked[:, 6].any() and masked[:, 11].any()                     # <EOA> is diffused


def test_ppm_keeps_earlier_span_clean():
    rec = _Record()
    L = TtTLoss(MASK, SOA, EOA, p_mix=0.0, p_prefix=1.0, p_trunc=0.0)
    for s in range(40):
        L(rec, SEQ, LM, generator=torch.Generator().manual_seed(s))
    seen = torch.stack([ids[0] for ids, _ in rec.calls])
    assert not (seen[:, 3:7] == MASK).any()
    assert (seen[:, 9:12] == MASK).any()


def test_sst_truncates_last_span_and_drops_eoa():
    rec = _Record()
    L = TtTLoss(MASK, SOA, EOA, p_mix=1.0, p_prefix=0.0, p_trunc=1.0)   # clean batch: see the cut
    lens = set()
    for s in range(40):
        L(rec, SEQ, LM, generator=torch.Generator().manual_seed(s))
        ids, mask = rec.calls[-1]
        real = ids[0][ids[0] != PAD]
        assert real.tolist()[:9] == SEQ[0, :9].tolist()                   # first span intact
        assert EOA not in real.tolist()[9:] and EOS not in real.tolist()
        lens.add(len(real) - 9)
    assert lens == {1}            # the last span holds 2 audio tokens: keep in [1, 1]
    # a longer last span gives several cut lengths
    seq = torch.tensor([[1, 10, 4, 30, 31, 32, 33, 34, 5, 2]])
    lm = torch.ones_like(seq)
    cuts = set()
    for s in range(60):
        L(rec, seq, lm, generator=torch.Generator().manual_seed(s))
        cuts.add(int((rec.calls[-1][0][0] != PAD).sum()) - 3)
    assert cuts == {1, 2, 3, 4}


def test_sst_off_and_strategies_off_leave_sequence():
    rec = _Record()
    L = TtTLoss(MASK, SOA, EOA, p_mix=1.0, p_prefix=0.0, p_trunc=0.0)
    L(rec, SEQ, LM)
    assert torch.equal(rec.calls[-1][0], SEQ)


def test_nonfinite_loss_raises():
    class Bad(_Record):
        def forward(self, input_ids, attention_mask=None):
            o = super().forward(input_ids, attention_mask)
            o.logits = o.logits * float("nan")
            return o
    with pytest.raises(FloatingPointError):
        TtTLoss(MASK, SOA, EOA)(Bad(), SEQ, LM)


def test_learns_and_trainer_subclass():
    from transformers import TrainingArguments
    model = tiny()
    L = TtTLoss(MASK, SOA, EOA)
    data = [{"input_ids": SEQ[0], "loss_mask": LM[0], "attention_mask": torch.ones_like(SEQ[0])}] * 16
    args = TrainingArguments(output_dir="/tmp/ttt_trainer_test", per_device_train_batch_size=8, max_steps=12,
                             learning_rate=1e-2, report_to=[], remove_unused_columns=False, use_cpu=True,
                             save_strategy="no", logging_steps=1000)
    before = float(L(model, SEQ, LM, generator=torch.Generator().manual_seed(0)))
    trainer = TtTTrainer(model=model, args=args, train_dataset=data, ttt_loss=L)
    trainer.train()
    after = float(L(model, SEQ, LM, generator=torch.Generator().manual_seed(0)))
    assert after < before


# ------------------------------------------------------------------ rejection
@pytest.mark.parametrize("kw, word", [(dict(p_mix=1.5), "p_mix"), (dict(p_prefix=-0.1), "p_prefix"),
                                      (dict(p_trunc=float("nan")), "p_trunc"), (dict(objective="nar"), "objective"),
                                      (dict(min_lambda=0.0), "min_lambda")])
def test_bad_hyperparameters(kw, word):
    with pytest.raises(ValueError, match=word):
        TtTLoss(MASK, SOA, EOA, **kw)


def test_bad_ids():
    with pytest.raises(ValueError, match="distinct"):
        TtTLoss(SOA, SOA, EOA)
    L = TtTLoss(MASK, SOA, EOA)
    with pytest.raises(ValueError, match="input_ids"):
        L(tiny(), SEQ[0], LM[0])
    with pytest.raises(TypeError, match="input_ids"):
        L(tiny(), SEQ.float(), LM)
    with pytest.raises(ValueError, match="loss_mask"):
        L(tiny(), SEQ, LM[:, :-1])
    with pytest.raises(ValueError, match="mask_token_id"):
        L(tiny(), SEQ.masked_fill(SEQ == 30, MASK), LM)
    with pytest.raises(ValueError, match="attention_mask"):
        modality_aware_mask(torch.full((1, 4), -1), torch.ones(1, 3))
    with pytest.raises(TypeError, match="ttt_loss"):
        TtTTrainer(model=tiny(), ttt_loss=None)


def test_bad_generation_args():
    kw = dict(soa_id=SOA, eoa_id=EOA, mask_token_id=MASK, eos_token_id=EOS, audio_token_ids=AUDIO)
    with pytest.raises(ValueError, match="block_size"):
        block_diffusion_generate(tiny(), [SEQ[0, :3]], block_size=0, **kw)
    with pytest.raises(ValueError, match="steps"):
        block_diffusion_generate(tiny(), [SEQ[0, :3]], block_size=4, steps=8, **kw)
    with pytest.raises(ValueError, match="prompt"):
        block_diffusion_generate(tiny(), [torch.tensor([])], **kw)


# ------------------------------------------------------------------ generation
class _Scripted(torch.nn.Module):
    """Text: ``script[n]`` where n counts text tokens and <SOA>s so far; audio at offset o after <SOA>:
    token 30 + o, or <EOA> when o == span_len; earlier offsets are more confident."""

    def __init__(self, script, span_len, vocab=40):
        super().__init__()
        self.script, self.span_len, self.vocab = script, span_len, vocab
        self.calls = 0

    def _audio(self, off):
        return EOA if off == self.span_len else 30 + off % 10

    def forward(self, input_ids, attention_mask=None):
        self.calls += 1
        T = input_ids.shape[1]
        out = torch.zeros(1, T, self.vocab)
        ids = input_ids[0].tolist()
        spans = audio_span_ids(input_ids, SOA, EOA)[0].tolist()
        soa = [j for j, t in enumerate(ids) if t == SOA]
        for i in range(T - 1):
            if spans[i + 1] >= 0 and ids[i + 1] != SOA:
                off = i - max(j for j in soa if j <= i)
                out[0, i, self._audio(off)] = 5.0 + 0.1 * (10 - off)
        if spans[-1] >= 0 and ids[-1] != EOA:
            out[0, -1, self._audio(T - 1 - soa[-1])] = 5.0
        else:
            n = sum(1 for t, s in zip(ids, spans) if s < 0 or t == SOA)
            out[0, -1, self.script[min(n, len(self.script) - 1)]] = 5.0

        class O:
            logits = out
        return O


def test_block_diffusion_cuts_at_eoa_and_resumes_text():
    script = [0, 10, SOA, 11, EOS]       # after prompt [1]: 10, SOA ... then 11, EOS
    model = _Scripted(script, span_len=5)
    kw = dict(soa_id=SOA, eoa_id=EOA, mask_token_id=MASK, eos_token_id=EOS, audio_token_ids=AUDIO)
    res = block_diffusion_generate(model, [torch.tensor([1])], block_size=4, steps=2, **kw)
    assert res.sequences[0].tolist() == [10, SOA, 30, 31, 32, 33, 34, EOA, 11, EOS]
    # 2 text calls, 2 blocks x 2 unmasking rounds, 2 text calls
    assert res.forward_passes[0] == model.calls == 8


def test_ar_generate_on_scripted_model():
    script = [0, 10, SOA, 11, EOS]
    model = _Scripted(script, span_len=3)
    kw = dict(soa_id=SOA, eoa_id=EOA, mask_token_id=MASK, eos_token_id=EOS, audio_token_ids=AUDIO)
    res = ar_generate(model, [torch.tensor([1])], **kw)
    assert res.sequences[0].tolist() == [10, SOA, 30, 31, 32, EOA, 11, EOS]


def test_generation_respects_vocabulary_and_cap_on_random_model():
    model = tiny()
    kw = dict(soa_id=SOA, eoa_id=EOA, mask_token_id=MASK, eos_token_id=EOS, audio_token_ids=AUDIO)
    prompt = torch.tensor([1, 10, SOA])
    for fn in (block_diffusion_generate, ar_generate):
        out = fn(model, [prompt], max_new_tokens=10, max_audio_len=12, **kw).sequences[0].tolist()
        spans = audio_span_ids(torch.tensor([[SOA] + out]), SOA, EOA)[0, 1:].tolist()
        for t, s in zip(out, spans):
            assert t != MASK
            if s >= 0 and t not in (EOA, SOA):
                assert t in AUDIO
            if s < 0:
                assert t not in AUDIO
        n_audio = sum(1 for t, s in zip(out, spans) if s >= 0 and t not in (EOA, SOA))
        assert n_audio <= 12 + 10


# ------------------------------------------------------------------ speech proxy
def test_speech_proxy_deterministic_and_checked():
    a = speech.synthesize("abc", 1, np.random.default_rng(0))
    b = speech.synthesize("abc", 1, np.random.default_rng(0))
    assert np.array_equal(a, b)
    frames = speech.log_mel(a)
    assert frames.shape == (len(a) // speech.HOP, speech.N_MELS) and np.isfinite(frames).all()
    with pytest.raises(ValueError, match="alphabet"):
        speech.synthesize("xyz", 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="speaker"):
        speech.synthesize("abc", 9, np.random.default_rng(0))
    with pytest.raises(ValueError, match="frames"):
        speech.KMeansCodec(4).fit(np.full((10, 3), np.nan))


def test_mel_filterbank_peaks_increase():
    fb = speech.mel_filterbank()
    peaks = fb.argmax(1)
    assert (np.diff(peaks.numpy()) >= 0).all() and float(fb.max()) <= 1.0 + 1e-6


def test_edit_distance_reference():
    assert speech.edit_distance("kitten", "sitting") == 3
    assert error_rate([1, 2, 3], [1, 2, 3]) == 0.0
    assert error_rate([], [1, 2]) == 1.0
    with pytest.raises(ValueError, match="ref"):
        error_rate([1], [])


# ------------------------------------------------------------------ experiment wiring
def test_sequences_layout():
    w, s, tk = ["ab", "cde"], 1, [np.array([0, 1]), np.array([2, 3, 4])]
    p, r = experiment.tts_sequence(w, s, tk)
    assert r.count(experiment.SOA) == 2 and r.count(experiment.EOA) == 2 and r[-1] == experiment.EOS
    p, r = experiment.asr_sequence(w, s, tk)
    assert p.count(experiment.SOA) == 1 and experiment.SOA not in r


def test_arms_map_to_losses():
    assert experiment.ARM_LOSS["ttt_no_sst"]["p_trunc"] == 0.0
    assert experiment.ARM_LOSS["ttt_no_banom"]["p_mix"] == 0.0
    assert experiment.ARM_LOSS["ttt_no_ppm"]["p_prefix"] == 0.0
    assert experiment.ARM_LOSS["ar_prefix"]["bidirectional_input_audio"] is True
    assert experiment.ARM_LOSS["ar"] == {"objective": "ar"}


def test_smoke_run_is_deterministic():
    a = experiment.run("smoke", 0)
    b = experiment.run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    for metric in ("tts_edit", "tts_len_err", "asr_cer"):
        arms = a["metrics"][metric]
        assert set(experiment.ARMS) | {"rerender", "wrong_text"} == set(arms)
        lens = {len(v) for v in arms.values()}
        assert len(lens) == 1
        assert all(np.isfinite(v).all() for v in arms.values())
    assert a["metrics"]["asr_cer"]["rerender"] == [0.0] * experiment.SCALES["smoke"]["n_test"]
