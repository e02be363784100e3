"""The analytic toy teacher of Parallel Token Prediction (arXiv:2512.21323; official code
``src/ptp/data/toy_increasing_sequence.py``, ``IncreasingSequenceTeacherModel``): an increasing
sequence over the vocabulary {0, ..., V - 1} whose next token repeats the current one or increases
it by one, with probability 1/2 each,

    P(t_{n+1} = t_n | t_<=n) = P(t_{n+1} = t_n + 1 | t_<=n) = 1/2     for t_n < V - 1,
    P(t_{n+1} = V - 1 | t_n = V - 1) = 1                              (the last id is absorbing: EOS).

The distribution is known in closed form, so with inverse-CDF sampling (``pick``, Sec. 2) the token
k steps ahead is a closed-form function of the context and the auxiliaries,

    t_{n+k} = min(t_n + #{j <= k : u_{n+j} >= 1/2}, V - 1),

which is the map f_P of Theorem 1 that a PTP student has to learn (:func:`closed_form_tokens`),
while the marginal of t_{n+k} given the context alone is min(t_n + Binomial(k, 1/2), V - 1)
(:func:`marginal_probs`): what independent multi-token heads can represent at best.

The teacher is a ``torch.nn.Module`` with the interface that :func:`iclr26.models.speculative.target_forward`
reads (``get_decoder()(input_ids=...).last_hidden_state`` and ``get_output_embeddings()``): its
hidden state is the one-hot of the current token, its output layer the fixed matrix of
log-probabilities, so :func:`~iclr26.decoding.ptp.train_ptp`, :func:`~iclr26.decoding.ptp.ar_sample`
and :func:`~iclr26.decoding.ptp.ptp_generate` run on it unchanged.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

__all__ = ["IncreasingSequenceTeacher", "closed_form_tokens", "marginal_probs", "increasing_sequences",
           "leading_match_length"]

#: log-probability used for impossible tokens (exp underflows to exactly 0 in float32)
_NEG = -1.0e4


def _check_vocab(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    return vocab_size


def _check_ids(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    ids = torch.as_tensor(ids)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"token ids must be an integer tensor, got dtype {ids.dtype}")
    if ids.numel() and ((ids < 0).any() or (ids >= vocab_size).any()):
        raise ValueError(f"token ids must lie in [0, {vocab_size}) (the teacher's vocabulary)")
    return ids.long()


class _OneHot(nn.Module):
    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids=None, **kwargs):
        ids = _check_ids(input_ids, self.vocab_size)
        if ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, length), got shape {tuple(ids.shape)}")
        return SimpleNamespace(last_hidden_state=nn.functional.one_hot(ids, self.vocab_size).float())


class IncreasingSequenceTeacher(nn.Module):
    """The analytic increasing-sequence teacher over ``vocab_size`` tokens (official default 100;
    the id V - 1 is absorbing and doubles as EOS). ``forward(input_ids)`` returns an object with
    ``logits`` (B, T, V) = log P(t_{n+1} | t_n) (impossible tokens at -1e4)."""

    def __init__(self, vocab_size: int = 100):
        super().__init__()
        V = _check_vocab(vocab_size)
        self.config = SimpleNamespace(vocab_size=V, hidden_size=V, eos_token_id=V - 1)
        self.decoder = _OneHot(V)
        self.lm_head = nn.Linear(V, V, bias=False)
        self.lm_head.weight.requires_grad_(False)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.log(self.transition_matrix()).clamp(min=_NEG).T)
        self.eval()

    def transition_matrix(self) -> torch.Tensor:
        """M (V, V) with M[a, b] = P(t_{n+1} = b | t_n = a)."""
        V = self.config.vocab_size
        M = torch.zeros(V, V)
        a = torch.arange(V - 1)
        M[a, a] = 0.5
        M[a, a + 1] = 0.5
        M[V - 1, V - 1] = 1.0
        return M

    def get_decoder(self):
        return self.decoder

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, **kwargs):
        return SimpleNamespace(logits=self.lm_head(self.decoder(input_ids=input_ids).last_hidden_state))


def closed_form_tokens(last: torch.Tensor, u: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """t_{n+k} = min(t_n + #{j <= k : u_{n+j} >= 1/2}, V - 1) for k = 1..K: the teacher's inverse-CDF
    samples after the last context token ``last`` (B,) driven by ``u`` (B, K) in [0, 1)."""
    V = _check_vocab(vocab_size)
    last = _check_ids(last, V)
    u = torch.as_tensor(u)
    if not u.is_floating_point() or u.dim() != 2 or last.shape != u.shape[:1]:
        raise ValueError(f"need last (B,) token ids and u (B, K) floats; got {tuple(last.shape)} and {tuple(u.shape)}")
    if (u < 0).any() or (u >= 1).any():
        raise ValueError("u must lie in [0, 1)")
    return (last[:, None] + (u >= 0.5).long().cumsum(1)).clamp(max=V - 1)


def marginal_probs(last: torch.Tensor, k: int, vocab_size: int) -> torch.Tensor:
    """P(t_{n+j} | t_n = last) for j = 1..k (B, k, V): min(last + Binomial(j, 1/2), V - 1), the best
    that a head predicting t_{n+j} from the context alone (independent multi-token heads) can learn."""
    V = _check_vocab(vocab_size)
    last = _check_ids(last, V)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if last.dim() != 1:
        raise ValueError(f"last must be (B,) token ids, got shape {tuple(last.shape)}")
    M = IncreasingSequenceTeacher.transition_matrix(SimpleNamespace(config=SimpleNamespace(vocab_size=V))).double()
    p = nn.functional.one_hot(last, V).double()
    out = []
    for _ in range(k):
        p = p @ M
        out.append(p)
    return torch.stack(out, 1)


def increasing_sequences(n: int, length: int, vocab_size: int, generator: torch.Generator | None = None,
                         start: int = 0) -> torch.Tensor:
    """``n`` teacher samples of ``length`` tokens starting at token ``start`` (official ``make_data``:
    the first token is 0, then cumulative sums of fair switches, clamped at V - 1)."""
    V = _check_vocab(vocab_size)
    for name, v in (("n", n), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < V:
        raise ValueError(f"start must be a token id in [0, {V}), got {start!r}")
    u = torch.rand(n, length - 1, generator=generator, dtype=torch.float64)
    rest = closed_form_tokens(torch.full((n,), start, dtype=torch.long), u, V) if length > 1 else \
        torch.zeros(n, 0, dtype=torch.long)
    return torch.cat([torch.full((n, 1), start, dtype=torch.long), rest], 1)


def leading_match_length(pred: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Number of leading positions where ``pred`` (B, K) equals ``ref`` (B, K), per row (B,)."""
    pred, ref = torch.as_tensor(pred), torch.as_tensor(ref)
    if pred.shape != ref.shape or pred.dim() != 2:
        raise ValueError(f"pred and ref must be (B, K) of one shape, got {tuple(pred.shape)} and {tuple(ref.shape)}")
    return (pred == ref).long().cumprod(1).sum(1)
