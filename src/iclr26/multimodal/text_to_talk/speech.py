"""A synthetic, speech-like corpus with a discrete audio codec trained here (a proxy for real speech).

No speech corpus, TTS engine or neural codec is available offline, so the audio side of the
text_to_talk check is built from scratch and is a *proxy*:

- :func:`synthesize`: a deterministic formant synthesiser. Every character of a 12-letter alphabet
  has two formant frequencies and a base duration (1-3 frames); a speaker scales all formants and
  the tempo; each rendering draws fresh jitter (formant scale +-3 %, a duration change of one frame
  with probability ``dur_jitter``, amplitude and additive white noise), so two renderings of the same
  text by the same speaker differ, like two recordings do.
- :func:`log_mel`: a log-mel spectrogram from ``torch.stft`` and a triangular mel filterbank written
  here (8 kHz, 256-point FFT, 160-sample hop = one frame per 20 ms, 24 mel bands).
- :class:`KMeansCodec`: a scikit-learn k-means on the log-mel frames; one audio token per frame.

The corpus is made of utterances of ``n_words`` words of 2-4 letters. Everything is a pure
function of its arguments and the numpy Generator passed in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans

ALPHABET = "abcdefghijkl"
SAMPLE_RATE = 8000
HOP = 160          # samples per frame (20 ms)
N_FFT = 256
N_MELS = 24


def _char_table(seed: int = 20260):
    """Fixed per-character formants (Hz) and base durations (frames); the same on every call."""
    rng = np.random.default_rng(seed)
    f1 = rng.uniform(250.0, 900.0, len(ALPHABET))
    f2 = rng.uniform(1000.0, 2900.0, len(ALPHABET))
    dur = rng.integers(1, 4, len(ALPHABET))
    return f1, f2, dur


F1, F2, BASE_DUR = _char_table()
#: speakers: formant scale and tempo (duration multiplier, rounded per character)
SPEAKERS = ((1.00, 1.0), (0.88, 1.0), (1.12, 1.5), (0.95, 1.5))


def durations(text: str, speaker: int, rng: np.random.Generator | None, dur_jitter: float = 0.2) -> np.ndarray:
    """Frames per character: base duration x speaker tempo, +-1 frame with probability ``dur_jitter``."""
    idx = _indices(text)
    d = np.maximum(1, np.round(BASE_DUR[idx] * SPEAKERS[speaker][1])).astype(int)
    if rng is not None and dur_jitter > 0:
        flip = rng.random(len(d)) < dur_jitter
        d = np.maximum(1, d + flip * rng.choice([-1, 1], len(d)))
    return d


def _indices(text: str) -> np.ndarray:
    if not isinstance(text, str) or not text:
        raise ValueError(f"text must be a non-empty string of letters from {ALPHABET!r}, got {text!r}")
    bad = set(text) - set(ALPHABET)
    if bad:
        raise ValueError(f"text holds characters outside the alphabet {ALPHABET!r}: {sorted(bad)}")
    return np.array([ALPHABET.index(c) for c in text])


def synthesize(text: str, speaker: int, rng: np.random.Generator, *, noise: float = 0.05,
               dur_jitter: float = 0.2) -> np.ndarray:
    """Waveform (float32, ``SAMPLE_RATE``) of ``text`` (letters only, no spaces) read by ``speaker``."""
    if not 0 <= speaker < len(SPEAKERS):
        raise ValueError(f"speaker must lie in [0, {len(SPEAKERS)}), got {speaker}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    idx = _indices(text)
    d = durations(text, speaker, rng, dur_jitter)
    scale = SPEAKERS[speaker][0] * (1.0 + rng.uniform(-0.03, 0.03))
    f1 = np.repeat(F1[idx] * scale, d * HOP)
    f2 = np.repeat(F2[idx] * scale, d * HOP)
    phase1 = 2 * np.pi * np.cumsum(f1) / SAMPLE_RATE
    phase2 = 2 * np.pi * np.cumsum(f2) / SAMPLE_RATE
    amp = rng.uniform(0.7, 1.0)
    wave = amp * (np.sin(phase1) + 0.5 * np.sin(phase2)) + noise * rng.standard_normal(len(f1))
    return wave.astype(np.float32)


def mel_filterbank(n_mels: int = N_MELS, n_fft: int = N_FFT, sr: int = SAMPLE_RATE) -> torch.Tensor:
    """Triangular mel filters (HTK mel scale), shape ``(n_mels, n_fft // 2 + 1)``."""
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    freqs = np.linspace(0.0, sr / 2, n_fft // 2 + 1)
    fb = np.zeros((n_mels, len(freqs)))
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        fb[m] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0.0, None)
    return torch.tensor(fb, dtype=torch.float32)


_FB = mel_filterbank()


def log_mel(wave: np.ndarray) -> np.ndarray:
    """Log-mel frames ``(n_frames, N_MELS)``, one per ``HOP`` samples (centre-free framing)."""
    x = torch.as_tensor(np.asarray(wave, dtype=np.float32))
    if x.ndim != 1 or x.numel() < HOP:
        raise ValueError(f"wave must be 1-D with at least {HOP} samples, got shape {tuple(x.shape)}")
    n_frames = x.numel() // HOP
    pad = N_FFT - HOP
    x = torch.nn.functional.pad(x[: n_frames * HOP], (pad // 2, pad - pad // 2))
    spec = torch.stft(x, N_FFT, hop_length=HOP, window=torch.hann_window(N_FFT), center=False,
                      return_complex=True).abs() ** 2
    mel = _FB @ spec[:, :n_frames]
    return torch.log(mel + 1e-4).T.numpy()


class KMeansCodec:
    """Audio tokenizer: k-means (scikit-learn) on log-mel frames; ``encode`` gives one token per frame."""

    def __init__(self, n_tokens: int = 32, random_state: int = 0):
        if not isinstance(n_tokens, int) or n_tokens < 2:
            raise ValueError(f"n_tokens must be an integer >= 2, got {n_tokens!r}")
        self.n_tokens = n_tokens
        self.random_state = random_state

    def fit(self, frames: np.ndarray) -> "KMeansCodec":
        frames = np.asarray(frames, dtype=np.float64)
        if frames.ndim != 2 or len(frames) < self.n_tokens or not np.isfinite(frames).all():
            raise ValueError(f"frames must be a finite 2-D array with >= n_tokens rows, got {frames.shape}")
        self.kmeans_ = KMeans(self.n_tokens, n_init=1, random_state=self.random_state).fit(frames)
        return self

    def encode(self, frames: np.ndarray) -> np.ndarray:
        return self.kmeans_.predict(np.asarray(frames, dtype=np.float64)).astype(np.int64)


def random_word(rng: np.random.Generator, lo: int = 2, hi: int = 4) -> str:
    return "".join(rng.choice(list(ALPHABET), rng.integers(lo, hi + 1)))


@dataclass
class Utterance:
    words: list[str]
    speaker: int
    frames: list[np.ndarray]      # log-mel frames per word (the words are rendered one after another)
    tokens: list[np.ndarray] | None = None


def render(words: list[str], speaker: int, rng: np.random.Generator, **kw) -> Utterance:
    """Render each word separately (one audio span per word, as in interleaved text/audio responses)."""
    return Utterance(list(words), speaker, [log_mel(synthesize(w, speaker, rng, **kw)) for w in words])


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences (lists, arrays or strings)."""
    a, b = list(a), list(b)
    prev = np.arange(len(b) + 1)
    for i, x in enumerate(a, 1):
        cur = np.empty_like(prev)
        cur[0] = i
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return int(prev[-1])


def error_rate(hyp, ref) -> float:
    """Edit distance over reference length (CER for characters, token edit rate for audio tokens)."""
    if len(ref) == 0:
        raise ValueError("ref must be non-empty")
    return edit_distance(hyp, ref) / len(ref)
