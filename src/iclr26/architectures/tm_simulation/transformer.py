"""A hard-attention transformer that runs a synchronous multi-queue machine, one token per tick.

Li & Wang, "Efficient Turing Machine Simulation with Transformers", ICLR 2026 (arXiv:2512.00003),
Step 2: a synchronous multi-queue TM is a constant bit-size transformer whose attention reads each
queue's front at a *fixed relative offset*. Token ``t`` holds what every queue pushed at tick ``t``
plus the finite control; a queue of length ``N`` shows at tick ``t`` what it was pushed at tick
``t - N``, so head ``j`` attends to the token ``N_j`` positions back. With the paper's levels the
offsets are ``2 b^i``: geometric, and the context window is ``max N_j + 1 = O(s)``. The heads are
spread over ``layers`` layers (the paper's ``H`` heads per layer, ``K = H L``); the feed-forward
block computes the tick: the pushes, the register updates and ``delta`` of the TM, all as exact
ReLU circuits on one-hot codes (a constant number of bits per token).

The opcode of each tick (see :mod:`.queues`) enters as an input embedding beside the token; it is
produced by the simulator's scheduler (see the README's deviations).
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from .machines import BLANK, MOVES, TuringMachine
from .queues import DUMMY, KINDS


def _gate(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``x`` if the bit ``g`` is 1 else 0, for a one-hot ``x``: ``relu(x + g - 1)``."""
    return torch.relu(x + g - 1.0)


def _and(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a + b - 1.0)


class QueueMachineTransformer(nn.Module):
    """Hard-attention decoder for the synchronous ``K``-queue machine of a ``k``-tape TM.

    Parameters: ``tm`` (the :class:`TuringMachine` whose ``delta`` the FFN holds), ``queue_lengths``
    (``N_1..N_K``: the attention offsets) and ``layers`` (the heads' layers). Call :meth:`run`.
    """

    def __init__(self, tm: TuringMachine, queue_lengths, layers: int = 1):
        super().__init__()
        if not isinstance(tm, TuringMachine):
            raise TypeError(f"tm must be a TuringMachine, got {type(tm).__name__}")
        lengths = list(queue_lengths)
        if any(isinstance(n, bool) or not isinstance(n, int) for n in lengths):
            raise ValueError(f"queue_lengths must be integers, got {queue_lengths!r}")
        if not lengths or min(lengths) < 1:
            raise ValueError(f"queue_lengths must be a non-empty list of positive lengths, got {queue_lengths!r}")
        if not isinstance(layers, int) or not 1 <= layers <= len(lengths) + 1:
            raise ValueError(f"layers must be an integer in [1, {len(lengths) + 1}] (one head each at least), "
                             f"got {layers!r}")
        self.tm, self.lengths, self.K, self.k = tm, lengths, len(lengths), tm.tapes
        self.gamma = list(tm.alphabet)
        self.vocab = self.gamma + [DUMMY]
        self.states = list(tm.states)
        G, V, Q, K, k = len(self.gamma), len(self.vocab), len(self.states), self.K, self.k
        # token layout: pushes (K x V) | state (Q) | reg (G) | heads (k x G) | writes (k x G) | moves (k x 3)
        self.sl = {}
        o = 0
        for name, n in (("push", K * V), ("state", Q), ("reg", G), ("heads", k * G), ("writes", k * G),
                        ("moves", k * 3)):
            self.sl[name] = slice(o, o + n)
            o += n
        self.d_token = o
        self.window = max(lengths) + 1
        # heads: offset 1 reads the control of the previous token, offset N_j the front of queue j
        offsets = [1] + lengths
        self.register_buffer("offsets", torch.tensor(offsets))
        self.head_layer = [h % layers for h in range(len(offsets))]
        self.layers = layers
        # delta as a two-layer ReLU lookup: key = (state, heads_1..k) one-hot conjunction -> table row
        keys = list(itertools.product(range(Q), *[range(G)] * k))
        w1 = torch.zeros(len(keys), Q + k * G)
        out = torch.zeros(len(keys), Q + k * G + k * 3)
        for r, (q, *hs) in enumerate(keys):
            w1[r, q] = 1.0
            for t, h in enumerate(hs):
                w1[r, Q + t * G + h] = 1.0
            res = tm.step(self.states[q], [self.gamma[h] for h in hs])
            if res is None:                              # halted: keep the state, write what was read
                q2, wr, mv = self.states[q], [self.gamma[h] for h in hs], [0] * k
            else:
                q2, wr, mv = res
            out[r, self.states.index(q2)] = 1.0
            for t in range(k):
                out[r, Q + t * G + self.gamma.index(wr[t])] = 1.0
                out[r, Q + k * G + t * 3 + MOVES.index(mv[t])] = 1.0
        self.delta_in = nn.Linear(Q + k * G, len(keys))
        self.delta_out = nn.Linear(len(keys), Q + k * G + k * 3, bias=False)
        with torch.no_grad():
            self.delta_in.weight.copy_(w1)
            self.delta_in.bias.fill_(-float(k))          # all k + 1 parts must match
            self.delta_out.weight.copy_(out.T)
        self.requires_grad_(False)

    # ------------------------------------------------------------------ encoding
    def encode_op(self, op) -> torch.Tensor:
        """One-hot ``(kind, a, src)``: kind (8) | a (K) | src (max(K, k))."""
        kind, a, src = op
        if kind not in KINDS:
            raise ValueError(f"unknown opcode kind {kind!r}; allowed: {', '.join(KINDS)}")
        n_src = max(self.K, self.k)
        v = torch.zeros(len(KINDS) + self.K + n_src)
        v[KINDS.index(kind)] = 1.0
        if a >= 0:
            v[len(KINDS) + a] = 1.0
        if src >= 0:
            v[len(KINDS) + self.K + src] = 1.0
        return v

    def prompt(self, cells, state=None) -> torch.Tensor:
        """The ``max N`` prompt tokens holding the queues' initial cells (queue ``j``'s cell ``c`` at
        position ``max N - N_j + c``) and the initial control (start state, blank registers)."""
        if len(cells) != self.K or any(len(c) != n for c, n in zip(cells, self.lengths)):
            raise ValueError(f"cells must be {self.K} lists of lengths {self.lengths}")
        W = max(self.lengths)
        X = torch.zeros(W, self.d_token)
        V, G = len(self.vocab), len(self.gamma)
        for j, (c, n) in enumerate(zip(cells, self.lengths)):
            for p in range(W):
                sym = c[p - (W - n)] if p >= W - n else DUMMY
                X[p, self.sl["push"].start + j * V + self.vocab.index(sym)] = 1.0
        X[:, self.sl["state"].start + self.states.index(state or self.tm.start)] = 1.0
        X[:, self.sl["reg"].start + self.gamma.index(BLANK)] = 1.0
        for t in range(self.k):
            X[:, self.sl["heads"].start + t * G + self.gamma.index(BLANK)] = 1.0
            X[:, self.sl["writes"].start + t * G + self.gamma.index(BLANK)] = 1.0
            X[:, self.sl["moves"].start + t * 3 + MOVES.index(0)] = 1.0
        return X

    # ------------------------------------------------------------------ forward
    def attend(self, X: torch.Tensor) -> torch.Tensor:
        """Hard attention of the next position ``P = len(X)`` over the last ``window - 1`` tokens:
        head ``h`` scores position ``p`` by ``-|P - p - offset_h|`` and takes the argmax; returns the
        values read, one row per head (layers stack their heads' reads in the residual stream)."""
        P = X.shape[0]
        lo = max(0, P - self.window + 1)
        rel = P - torch.arange(lo, P)
        scores = -(rel[None, :] - self.offsets[:, None]).abs().to(X.dtype)
        if (scores.max(dim=1).values < 0).any():
            raise ValueError(f"a head's offset reaches before the sequence start (need >= {int(self.offsets.max())} tokens)")
        reads = torch.zeros(len(self.offsets), self.d_token, dtype=X.dtype)
        for layer in range(self.layers):                   # each layer's heads read their group's fronts
            hs = [h for h in range(len(self.offsets)) if self.head_layer[h] == layer]
            att = torch.nn.functional.one_hot(scores[hs].argmax(dim=1), rel.numel()).to(X.dtype)
            reads[hs] = att @ X[lo:P]
        return reads

    def ffn(self, opv: torch.Tensor, prev: torch.Tensor, fronts: torch.Tensor) -> torch.Tensor:
        """The tick as a ReLU circuit: ``opv`` the opcode, ``prev`` the previous token, ``fronts``
        the ``K x V`` front symbols; returns the new token."""
        K, k, V, G = self.K, self.k, len(self.vocab), len(self.gamma)
        nk = len(KINDS)
        kind = {n: opv[i] for i, n in enumerate(KINDS)}
        a, src = opv[nk:nk + K], opv[nk + K:]
        reg = prev[self.sl["reg"]]
        heads = prev[self.sl["heads"]].view(k, G)
        writes = prev[self.sl["writes"]].view(k, G)
        moves = prev[self.sl["moves"]].view(k, 3)
        state = prev[self.sl["state"]]
        pad = torch.zeros(k, 1)
        dummy = torch.zeros(V)
        dummy[V - 1] = 1.0
        # per-queue control bits (all 0/1): popped, stored reg, wrote tape t, copied from queue q
        pop = _and(kind["load"], a) + _and(kind["copy"], src[:K])                       # (K,)
        st = _and(kind["store"], a)                                                     # (K,)
        wr = _and(_and(kind["write"], a)[:, None], src[None, :k])                       # (K, k)
        cp = _and(_and(kind["copy"], a)[:, None], src[None, :K])                        # (K, K)
        keep = 1.0 - pop - st - wr.sum(1) - cp.sum(1)
        pushes = (_gate(fronts, keep[:, None]) + _gate(dummy[None, :], pop[:, None])
                  + _gate(torch.cat([reg, torch.zeros(1)])[None, :], st[:, None])
                  + _gate(torch.cat([writes, pad], 1)[None, :, :], wr[:, :, None]).sum(1)
                  + _gate(fronts[None, :, :], cp[:, :, None]).sum(1))
        load = _and(kind["load"], a)                                                    # (K,)
        blank = torch.zeros(G)
        blank[self.gamma.index(BLANK)] = 1.0
        new_reg = (_gate(reg, 1.0 - load.sum() - kind["blank"]) + _gate(blank, kind["blank"])
                   + _gate(fronts[:, :G], load[:, None]).sum(0))
        h = _and(kind["head"], src[:k])[:, None]                                        # (k, 1)
        new_heads = _gate(heads, 1.0 - h) + _gate(reg[None, :], h)
        table = self.delta_out(torch.relu(self.delta_in(torch.cat([state, heads.reshape(-1)]))))
        d = kind["delta"]
        Q = len(self.states)
        new_state = _gate(table[:Q], d) + _gate(state, 1.0 - d)
        new_writes = _gate(table[Q:Q + k * G], d) + _gate(writes.reshape(-1), 1.0 - d)
        new_moves = _gate(table[Q + k * G:], d) + _gate(moves.reshape(-1), 1.0 - d)
        return torch.cat([pushes.reshape(-1), new_state, new_reg, new_heads.reshape(-1), new_writes, new_moves])

    @torch.no_grad()
    def forward(self, X: torch.Tensor, op) -> torch.Tensor:
        """One decoding step: the next token after ``X`` under opcode ``op``."""
        reads = self.attend(X)
        prev = reads[0]
        V = len(self.vocab)
        fronts = torch.stack([reads[1 + j, self.sl["push"]][j * V:(j + 1) * V] for j in range(self.K)])
        return self.ffn(self.encode_op(op), prev, fronts)

    @torch.no_grad()
    def run(self, cells, ops, n_ticks: int, state=None) -> torch.Tensor:
        """Decode ``n_ticks`` tokens after the prompt of ``cells``; ``ops`` lists ``(tick, opcode)``
        (every other tick is ``keep``). Returns all tokens, prompt first."""
        sched = dict(ops)
        if any(t < 0 or t >= n_ticks for t in sched):
            raise ValueError(f"opcode ticks must lie in [0, {n_ticks})")
        X = self.prompt(cells, state)
        out = torch.zeros(X.shape[0] + n_ticks, self.d_token)
        out[:X.shape[0]] = X
        W = X.shape[0]
        for t in range(n_ticks):
            P = W + t
            out[P] = self.forward(out[max(0, P - self.window + 1):P], sched.get(t, ("keep", -1, -1)))
        return out

    # ------------------------------------------------------------------ decoding
    def queue_cells(self, tokens: torch.Tensor, ticks: int):
        """The queues' cells after ``ticks`` ticks, read from the last ``N_j`` tokens."""
        W, V = max(self.lengths), len(self.vocab)
        cells = []
        for j, n in enumerate(self.lengths):
            c = []
            for cell in range(n):
                p = W + ticks - n + (cell - ticks) % n
                c.append(self.vocab[int(tokens[p, self.sl["push"]][j * V:(j + 1) * V].argmax())])
            cells.append(c)
        return cells

    def moves_at(self, tokens: torch.Tensor, tick: int) -> tuple:
        """The head moves (one of -1, 0, 1 per tape) held by the token the network wrote at ``tick``."""
        W = max(self.lengths)
        mv = tokens[W + tick, self.sl["moves"]].view(self.k, 3).argmax(1)
        return tuple(MOVES[int(i)] for i in mv)

    def state_at(self, tokens: torch.Tensor, ticks: int) -> str:
        """The TM state held by the token of the last tick."""
        W = max(self.lengths)
        return self.states[int(tokens[W + ticks - 1, self.sl["state"]].argmax())]
