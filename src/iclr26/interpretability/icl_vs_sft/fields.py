"""Decision fields of in-context learning (ICL) and supervised fine-tuning (SFT) on the 2-D angle task.

From "Comparing the Learning Dynamics of In-Context Learning and Fine-Tuning in Language Models"
(Confavreux, Singh, Lee, Sabran, Saxe; ICLR 2026; OpenReview cJAtzOcAnd; official code
github.com/basile6/ICLvsSFT). The task (Sec. 2 of the paper): inputs are integer pairs ``(n1, n2)`` on a
``100 x 100`` grid, the label is the side of a line through the grid centre at angle ``theta`` from the
``n1`` axis, and the two labels are the nonce words " Baz" / " Rud". ICL sees ``k`` labelled
exemplars per class in the prompt; SFT is trained on the same exemplars without a prompt. The *decision
field* is the model's label probability over the whole input grid; the paper summarises it by accuracy,
confidence (mean max-softmax over the two labels), smoothness and the inferred boundary angle.

>>> X, y = make_angle_task(45.0, 4, seed=0)                      # 4 exemplars per class
>>> ctx = icl_context(X, y)                                      # "Input: 07 53\nLabel: Baz\n..."
>>> field = decision_field(model, tok, context=ctx, stride=10)   # doctest: +SKIP
>>> field_metrics(field.prob, field.coords, theta=45.0)          # doctest: +SKIP
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

__all__ = ["LABELS", "GRID", "angle_labels", "make_angle_task", "format_query", "icl_context",
           "label_token_ids", "QueryScores", "score_queries", "DecisionField", "decision_field",
           "field_metrics", "inferred_angle", "smoothness", "finetune_to_accuracy"]

#: the paper's nonce labels (Sec. 2); class 0 -> " Baz", class 1 -> " Rud"
LABELS = (" Baz", " Rud")
#: the paper's input range: integers 0..99 on both axes (Sec. 2)
GRID = 100


def _check_theta(theta) -> float:
    try:
        t = float(theta)
    except (TypeError, ValueError):
        raise ValueError(f"theta must be an angle in degrees in [0, 180], got {theta!r}") from None
    if not np.isfinite(t) or not 0.0 <= t <= 180.0:
        raise ValueError(f"theta must be an angle in degrees in [0, 180], got {theta!r}")
    return t


def _check_grid(grid_size) -> int:
    if isinstance(grid_size, bool) or not isinstance(grid_size, (int, np.integer)) or grid_size < 2:
        raise ValueError(f"grid_size must be an integer >= 2, got {grid_size!r}")
    return int(grid_size)


def angle_labels(X, theta: float, grid_size: int = GRID) -> np.ndarray:
    """Label of each input: 1 where ``(x - c) . (-sin theta, cos theta) > 0``, else 0.

    ``c = ((grid_size - 1) / 2, (grid_size - 1) / 2)`` is the grid centre and ``theta`` (degrees, in
    [0, 180]) the angle of the boundary from the ``n1`` axis: theta = 0 splits on ``n2``, theta = 90 on
    ``n1``. Points on the line get label 0."""
    t = np.deg2rad(_check_theta(theta))
    g = _check_grid(grid_size)
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"X must have shape (n, 2), got {X.shape}")
    c = (g - 1) / 2.0
    margin = -(X[:, 0] - c) * np.sin(t) + (X[:, 1] - c) * np.cos(t)
    return (margin > 1e-9).astype(np.int64)


def make_angle_task(theta: float, k: int, seed=None, grid_size: int = GRID, exclude=None):
    """``k`` exemplars per class, drawn without replacement from the grid, in a random order.

    Returns ``(X [2k, 2] int, y [2k] int)``. ``exclude``: an ``(m, 2)`` array of inputs not to draw
    (e.g. the validation points). Class-balanced sampling as in the paper (Sec. 2)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (exemplars per class) must be a positive integer, got {k!r}")
    g = _check_grid(grid_size)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n1, n2 = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    pool = np.stack([n1.ravel(), n2.ravel()], 1)
    if exclude is not None and len(exclude):
        ex = {(int(a), int(b)) for a, b in np.asarray(exclude)}
        pool = pool[[(int(a), int(b)) not in ex for a, b in pool]]
    y = angle_labels(pool, theta, g)
    picks = []
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        if len(idx) < k:
            raise ValueError(f"only {len(idx)} inputs of class {cls} at theta={theta}; asked for k={k}")
        picks.append(rng.choice(idx, size=k, replace=False))
    order = rng.permutation(np.concatenate(picks))
    return pool[order].astype(np.int64), y[order]


def format_query(x, width: int = 2) -> str:
    """``"Input: 07 53\\nLabel:"`` (numbers zero-padded to ``width`` digits so every query has the same
    length in tokens)."""
    a, b = (int(v) for v in x)
    return f"Input: {a:0{width}d} {b:0{width}d}\nLabel:"


def icl_context(X, y, labels=LABELS, width: int = 2) -> str:
    """The ICL prompt prefix: one ``query + label + newline`` line pair per exemplar, in the given order."""
    X, y = np.asarray(X), np.asarray(y)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    if len(labels) != 2:
        raise ValueError(f"labels must be two strings, got {labels!r}")
    if len(y) and not np.isin(y, (0, 1)).all():
        raise ValueError("y must hold class indices 0 or 1")
    return "".join(f"{format_query(x, width)}{labels[int(c)]}\n" for x, c in zip(X, y))


def label_token_ids(tok, labels=LABELS) -> tuple[int, int]:
    """First token of each label (the token whose logit is scored); they must differ."""
    if len(labels) != 2:
        raise ValueError(f"labels must be two strings, got {labels!r}")
    ids = []
    for lab in labels:
        t = tok(lab, add_special_tokens=False)["input_ids"]
        if not t:
            raise ValueError(f"label {lab!r} tokenizes to nothing")
        ids.append(int(t[0]))
    if ids[0] == ids[1]:
        raise ValueError(f"labels {labels!r} share their first token {ids[0]}; choose labels that differ at once")
    return ids[0], ids[1]


@dataclass
class QueryScores:
    """``prob``: P(labels[1]) among the two label tokens, per query; ``logits``: the two label-token
    logits ``[n, 2]``; ``reps``: ``{layer: [n, hidden]}`` residual stream at the query's last token
    after each requested decoder block (empty when no layers were asked)."""
    prob: np.ndarray
    logits: np.ndarray
    reps: dict


def _tokens(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def score_queries(model, tok, queries, context: str = "", labels=LABELS, layers=(), batch_size: int = 50):
    """Next-token label probabilities (and optionally last-token representations) for each query.

    The context (the ICL exemplars) is run once and its key/value cache reused for every query batch;
    context and query are tokenized separately and concatenated. Queries are grouped by token length,
    so no padding is ever used. ``layers``: decoder-block indices whose output (the residual stream
    after the block's MLP) is recorded at the last query token, through :mod:`iclr26.models.hooks`.
    Works on any transformers causal LM (peft-wrapped too)."""
    import torch

    from iclr26.models import hooks

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    queries = list(queries)
    if not queries or not all(isinstance(q, str) and q for q in queries):
        raise ValueError("queries must be a non-empty list of non-empty strings")
    a, b = label_token_ids(tok, labels)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    blocks = hooks.decoder_layers(base)
    layers = [int(l) for l in layers]
    for l in layers:
        if not 0 <= l < len(blocks):
            raise ValueError(f"layer {l} out of range: the model has {len(blocks)} decoder blocks (0..{len(blocks) - 1})")
    toks = [_tokens(tok, q) for q in queries]
    ctx = _tokens(tok, context) if context else []
    n = len(queries)
    logits = np.zeros((n, 2))
    reps = {l: None for l in layers}
    model.eval()
    with torch.no_grad():
        cache = None
        if ctx:
            cache = model(input_ids=torch.tensor([ctx]), use_cache=True).past_key_values
        by_len: dict[int, list[int]] = {}
        for i, t in enumerate(toks):
            by_len.setdefault(len(t), []).append(i)
        for length, idx in by_len.items():
            for s in range(0, len(idx), batch_size):
                part = idx[s:s + batch_size]
                ids = torch.tensor([toks[i] for i in part])
                kw = {}
                if cache is not None:
                    c = copy.deepcopy(cache)
                    c.batch_repeat_interleave(len(part))
                    kw = dict(past_key_values=c, attention_mask=torch.ones(len(part), len(ctx) + length, dtype=torch.long))
                with hooks.record_activations(model, {str(l): blocks[l] for l in layers} or {"_": blocks[0]}) as acts:
                    out = model(input_ids=ids, use_cache=cache is not None, **kw)
                last = out.logits[:, -1, :].float()
                logits[part] = last[:, [a, b]].numpy()
                for l in layers:
                    h = acts[str(l)][0][:, -1, :].float().numpy()
                    if reps[l] is None:
                        reps[l] = np.zeros((n, h.shape[1]))
                    reps[l][part] = h
    z = logits - logits.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    return QueryScores(prob=p[:, 1], logits=logits, reps=reps)


@dataclass
class DecisionField:
    """``coords``: the grid coordinates sampled on each axis; ``prob[i, j]``: P(labels[1]) at input
    ``(coords[i], coords[j])``; ``reps``: as in :class:`QueryScores`, rows in ``prob.ravel()`` order."""
    coords: np.ndarray
    prob: np.ndarray
    reps: dict

    @property
    def inputs(self) -> np.ndarray:
        n1, n2 = np.meshgrid(self.coords, self.coords, indexing="ij")
        return np.stack([n1.ravel(), n2.ravel()], 1)


def decision_field(model, tok, context: str = "", grid_size: int = GRID, stride: int = 1, offset: int = 0,
                   labels=LABELS, layers=(), batch_size: int = 50) -> DecisionField:
    """The model's label probability at every input of the grid (the paper's decision field over the
    full ``100 x 100`` grid; ``stride`` > 1 samples every ``stride``-th value from ``offset``)."""
    g = _check_grid(grid_size)
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be a positive integer, got {stride!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < g:
        raise ValueError(f"offset must be an integer in [0, {g - 1}], got {offset!r}")
    coords = np.arange(offset, g, stride)
    if len(coords) < 2:
        raise ValueError(f"stride {stride} and offset {offset} leave fewer than 2 grid values per axis")
    f = DecisionField(coords=coords, prob=np.zeros((len(coords), len(coords))), reps={})
    s = score_queries(model, tok, [format_query(x) for x in f.inputs], context=context, labels=labels,
                      layers=layers, batch_size=batch_size)
    f.prob = s.prob.reshape(len(coords), len(coords))
    f.reps = s.reps
    return f


def smoothness(pred) -> float:
    """1 - the fraction of grid points whose predicted label differs from at least 2 of their 4
    neighbours (the paper's smoothness, Sec. 3; border points count their existing neighbours)."""
    P = np.asarray(pred)
    if P.ndim != 2 or min(P.shape) < 2:
        raise ValueError(f"pred must be a 2-D grid of at least 2 x 2 labels, got shape {P.shape}")
    diff = np.zeros(P.shape, dtype=int)
    diff[1:, :] += P[1:, :] != P[:-1, :]
    diff[:-1, :] += P[:-1, :] != P[1:, :]
    diff[:, 1:] += P[:, 1:] != P[:, :-1]
    diff[:, :-1] += P[:, :-1] != P[:, 1:]
    return float(1.0 - np.mean(diff >= 2))


def inferred_angle(inputs, pred) -> float:
    """Boundary angle (degrees in [0, 180)) of a linear classifier fitted to the predictions (the
    paper's inferred angle, Sec. 3): logistic regression on centred inputs with weak regularisation;
    weights ``w`` give the angle ``atan2(-w1, w2)`` under the convention of :func:`angle_labels`.
    NaN when the predictions hold one class only."""
    from sklearn.linear_model import LogisticRegression

    X = np.asarray(inputs, dtype=float)
    y = np.asarray(pred).ravel().astype(int)
    if X.ndim != 2 or X.shape[1] != 2 or len(X) != len(y):
        raise ValueError(f"inputs must be (n, 2) and pred n labels, got {X.shape} and {y.shape}")
    if len(np.unique(y)) < 2:
        return float("nan")
    Xc = (X - X.mean(0)) / max(X.std(), 1e-12)
    w = LogisticRegression(C=1e4, max_iter=2000).fit(Xc, y).coef_[0]
    return float(np.rad2deg(np.arctan2(-w[0], w[1])) % 180.0)


def field_metrics(prob, coords, theta: float | None = None, grid_size: int = GRID) -> dict:
    """Summaries of a decision field ``prob`` (P(class 1) on the grid ``coords x coords``):
    ``confidence`` = mean over the grid of max(p, 1 - p) (max-softmax over the two labels);
    ``smoothness`` (see :func:`smoothness`); ``angle`` (see :func:`inferred_angle`); with the true
    ``theta`` (on a grid of ``grid_size`` values per axis) also ``accuracy`` (predicted class = p > 0.5) and ``angle_error`` (in [0, 90])."""
    P = np.asarray(prob, dtype=float)
    coords = np.asarray(coords)
    if P.ndim != 2 or P.shape != (len(coords), len(coords)):
        raise ValueError(f"prob must be a square grid matching coords ({len(coords)} values), got {P.shape}")
    if not np.all((P >= 0) & (P <= 1)):
        raise ValueError("prob must hold probabilities in [0, 1]")
    pred = (P > 0.5).astype(int)
    n1, n2 = np.meshgrid(coords, coords, indexing="ij")
    inputs = np.stack([n1.ravel(), n2.ravel()], 1)
    out = {"confidence": float(np.maximum(P, 1 - P).mean()), "smoothness": smoothness(pred),
           "angle": inferred_angle(inputs, pred)}
    if theta is not None:
        truth = angle_labels(inputs, theta, grid_size).reshape(P.shape)
        out["accuracy"] = float((pred == truth).mean())
        d = abs(out["angle"] - float(theta)) % 180.0
        out["angle_error"] = float(min(d, 180.0 - d))
    return out


def finetune_to_accuracy(model, tok, X, y, X_val, y_val, target_accuracy: float, *, max_steps: int = 100,
                         lr: float = 1e-3, weight_decay: float = 0.0, labels=LABELS, seed: int = 0,
                         batch_size: int = 50) -> dict:
    """Fine-tune ``model`` (in place; a LoRA-wrapped model trains its adapters only) on the exemplars
    ``(X, y)`` with no ICL context, stopping at the first step whose validation accuracy reaches
    ``target_accuracy`` (the ICL validation accuracy: matched accuracy by design).

    Full-batch AdamW with a cosine schedule over ``max_steps`` (the paper: AdamW, cosine decay);
    the loss is the next-token cross-entropy of the label's first token after the query (full
    vocabulary). Returns ``{"steps", "val_accuracy", "reached", "history"}``; ``steps`` = 0 when the
    untrained model already reaches the target."""
    import torch

    if not 0.0 <= float(target_accuracy) <= 1.0:
        raise ValueError(f"target_accuracy must be in [0, 1], got {target_accuracy!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    X, y, X_val, y_val = (np.asarray(v) for v in (X, y, X_val, y_val))
    if len(X) != len(y) or len(X) == 0 or len(X_val) != len(y_val) or len(X_val) == 0:
        raise ValueError("X/y and X_val/y_val must be non-empty and of matching lengths")
    a, b = label_token_ids(tok, labels)
    target = torch.tensor([a if c == 0 else b for c in y])
    ids = torch.tensor([_tokens(tok, format_query(x)) for x in X])
    val_q = [format_query(x) for x in X_val]

    def val_acc():
        p = score_queries(model, tok, val_q, labels=labels, batch_size=batch_size).prob
        return float(np.mean((p > 0.5).astype(int) == y_val))

    torch.manual_seed(int(seed))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + np.cos(np.pi * min(s, max_steps) / max(max_steps, 1))))
    acc = val_acc()
    history = [(0, acc)]
    step = 0
    while acc < target_accuracy and step < max_steps:
        model.train()
        logits = model(input_ids=ids).logits[:, -1, :].float()
        loss = torch.nn.functional.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        acc = val_acc()
        history.append((step, acc, float(loss.detach())))
    model.eval()
    return {"steps": step, "val_accuracy": acc, "reached": bool(acc >= target_accuracy), "history": history}
