"""Tests for iclr26.architectures.tm_simulation (arXiv:2512.00003)."""
import math
import random

import pytest
import torch

from iclr26.architectures.tm_simulation import (BLANK, DUMMY, MACHINES, Clock, LayeredQueueStack,
                                                QueueMachineTransformer, QueueSimulator, SingleQueueSimulator,
                                                TuringMachine, binary_increment, copy_machine, integer_root,
                                                loglog_slope, overhead_per_step, palindrome_machine)
from iclr26.architectures.tm_simulation import machines as _machines
from iclr26.architectures.tm_simulation.machines import normalise, normalise_list
from iclr26.architectures.tm_simulation import experiment as E


def run_reference(tm, w, max_steps=20_000):
    """The reference run with a step cap that ends a non-halting machine quickly."""
    return _machines.run_reference(tm, w, max_steps=max_steps)

torch.set_num_threads(1)


def words(rng, n_max=12, count=6):
    out = ["", "0", "1"]
    for _ in range(count):
        n = rng.randint(2, n_max)
        out.append("".join(rng.choice("01") for _ in range(n)))
    return out


def final_tape(tm, w):
    state, tapes = run_reference(tm, w)[-1]
    return state, [t.strip(BLANK) for t, _ in tapes]


# ----------------------------------------------------------------------------- machines (references)
@pytest.mark.parametrize("w", ["", "0", "1", "1011", "111", "1000", "0111"])
def test_binary_increment_adds_one(w):
    state, (tape,) = final_tape(binary_increment(), w)
    assert state == "done"
    assert int(tape, 2) == (int(w, 2) if w else 0) + 1


@pytest.mark.parametrize("w,tape,head", [("1011", "1100", 1), ("", "1", 0), ("11", "100", 0), ("10", "11", 1)])
def test_binary_increment_halts_on_the_last_written_bit(w, tape, head):
    state, ((t, h),) = run_reference(binary_increment(), w)[-1]
    assert (state, t, h) == ("done", tape, head)


def test_machine_names_and_accepting_states():
    assert [MACHINES[n]().name for n in MACHINES] == list(MACHINES)
    assert binary_increment().accept == ("done",) and palindrome_machine().accept == ("yes",)
    assert copy_machine().tapes == 2 and binary_increment().tapes == 1


@pytest.mark.parametrize("w", ["", "0", "10", "0110", "10111"])
def test_copy_copies_and_rewinds(w):
    state, tapes = run_reference(copy_machine(), w)[-1]
    assert state == "done"
    assert tapes == ((w or BLANK, 0), (w or BLANK, 0))


@pytest.mark.parametrize("w", ["", "0", "01", "11", "010", "0110", "0111", "10101", "100"])
def test_palindrome_decides(w):
    state, _ = run_reference(palindrome_machine(), w)[-1]
    assert state == ("yes" if w == w[::-1] else "no")


def test_normalise_span_and_head():
    assert normalise({-2: "1", 0: BLANK, 3: "0"}, 5) == ("1____0__", 7)
    assert normalise({}, 4) == ("_", 0)
    assert normalise_list(["_", "1", "_"], 0) == ("_1", 0)


def test_reference_counts_steps():
    cfgs = run_reference(copy_machine(), "01")
    assert len(cfgs) == 1 + 3 + 3                       # copy 2 + end, rewind 2 + end
    assert cfgs[0] == ("copy", (("01", 0), ("_", 0)))
    assert cfgs[1] == ("copy", (("01", 1), ("0_", 1)))


def test_tm_rejects_bad_definitions():
    d = {("a", ("0",)): ("a", ("0",), (1,))}
    with pytest.raises(ValueError, match="tapes must be an integer >= 1"):
        TuringMachine("x", 0, ("a",), ("0", BLANK), "a", d)
    with pytest.raises(ValueError, match="must contain the blank"):
        TuringMachine("x", 1, ("a",), ("0",), "a", d)
    with pytest.raises(ValueError, match="start state 'b' is not one of the states"):
        TuringMachine("x", 1, ("a",), ("0", BLANK), "b", d)
    with pytest.raises(ValueError, match="uses a state outside"):
        TuringMachine("x", 1, ("a",), ("0", BLANK), "a", {("a", ("0",)): ("z", ("0",), (1,))})
    with pytest.raises(ValueError, match="need 1 entries each"):
        TuringMachine("x", 1, ("a",), ("0", BLANK), "a", {("a", ("0",)): ("a", ("0", "0"), (1,))})
    with pytest.raises(ValueError, match="symbol outside the alphabet"):
        TuringMachine("x", 1, ("a",), ("0", BLANK), "a", {("a", ("0",)): ("a", ("7",), (1,))})
    with pytest.raises(ValueError, match="moves must be in"):
        TuringMachine("x", 1, ("a",), ("0", BLANK), "a", {("a", ("0",)): ("a", ("0",), (2,))})
    with pytest.raises(ValueError, match=r"input symbols \['2'\] are not in the alphabet"):
        run_reference(copy_machine(), "012")


def test_reference_rejects_non_halting():
    loop = TuringMachine("loop", 1, ("a",), ("0", BLANK), "a", {("a", (BLANK,)): ("a", (BLANK,), (1,))})
    with pytest.raises(RuntimeError, match="did not halt within max_steps=50"):
        run_reference(loop, "", max_steps=50)


# ----------------------------------------------------------------------------- layered queue stack
@pytest.mark.parametrize("s,k,b", [(64, 2, 8), (64, 3, 4), (729, 3, 9), (65, 2, 9), (1, 1, 1), (8, 1, 8), (2, 5, 2),
                                   (1000, 3, 10), (1001, 3, 11)])
def test_integer_root(s, k, b):
    assert integer_root(s, k) == b


def test_integer_root_rejects():
    with pytest.raises(ValueError, match="need s >= 1 and k >= 1"):
        integer_root(0, 2)
    with pytest.raises(ValueError, match="need s >= 1 and k >= 1"):
        integer_root(4, 0)


def make_stack(b, levels, record=False):
    clock = Clock(record)
    cells = [[DUMMY] * (2 * b ** (i + 1)) for i in range(levels)]
    return LayeredQueueStack(clock, b, levels, list(range(levels)), cells), clock


def test_stack_ticks_by_hand():
    """b = 2, two levels (N = 4, 8): four pushes fill level 1 at ticks 0..3; the fifth moves the
    bottom half (cells 0, 1) to level 2 cells 0, 1 at ticks 8, 9 (level 2's cell 0 is at the front
    at t = 8), then writes level-1 cell 0 at t = 12."""
    st, clock = make_stack(2, 2, record=True)
    ends = []
    for x in "abcde":
        st.push("store", -1, x)
        ends.append(clock.t)
    assert ends == [1, 2, 3, 4, 13]
    assert [t for t, _ in clock.ops] == [0, 1, 2, 3, 8, 9, 12]
    assert [op for _, op in clock.ops][4:6] == [("copy", 1, 0), ("copy", 1, 0)]
    assert st.cells == [["e", DUMMY, "c", "d"], ["a", "b"] + [DUMMY] * 6]
    assert st.layout() == ((2, 0), (3, 2))
    assert st.contents() == list("abcde")
    # popping e, d, c empties level 1; the next pop refills it with a, b from level 2
    assert [st.pop() for _ in range(3)] == ["e", "d", "c"]
    t = clock.t
    assert st.pop() == "b" and st.layout() == ((0, 0), (1, 0))
    assert clock.ops[-3][1] == ("copy", 0, 1) and clock.ops[-1][1] == ("load", 0, -1)
    assert clock.t > t
    assert st.pop() == "a" and st.pop() == BLANK and len(st) == 0
    assert clock.ops[-1][1] == ("blank", -1, -1)


@pytest.mark.parametrize("b,levels", [(2, 3), (3, 2), (4, 3), (2, 1)])
def test_stack_matches_a_list_under_random_operations(b, levels):
    rng = random.Random(b * 10 + levels)
    st, clock = make_stack(b, levels)
    ref = []
    cap = 2 * b ** levels
    for _ in range(3000):
        if ref and (len(ref) >= cap - 1 or rng.random() < 0.45):
            assert st.pop() == ref.pop()
        else:
            x = rng.choice("01xyz")
            st.push("store", -1, x)
            ref.append(x)
        assert st.contents() == ref
        for i in range(levels):
            assert st.bottom[i] in (0, b ** (i + 1))
            assert st.count[i] % b ** i == 0 and 0 <= st.count[i] <= 2 * b ** (i + 1)
            real = sum(c != DUMMY for c in st.cells[i])
            assert real == st.count[i]


def test_stack_amortised_cost_is_order_b():
    """A level-i move waits at most one rotation 2 b^(i+1) and happens once per b^i operations, so
    the ticks per operation stay below ~(2 + 3 k') b (the paper's O(k' s^(1/k')))."""
    for b in (4, 8, 16):
        st, clock = make_stack(b, 2)
        rng = random.Random(b)
        n_ops = 4000
        depth = 0
        for _ in range(n_ops):
            if depth and rng.random() < 0.4:
                st.pop()
                depth -= 1
            elif depth < 2 * b * b - 1:
                st.push("store", -1, "1")
                depth += 1
            else:
                st.pop()
                depth -= 1
        per_op = clock.t / n_ops
        assert b / 2 < per_op < (2 + 3 * 2) * b


def test_stack_overflow_and_rejections():
    st, _ = make_stack(2, 1)
    for x in "abcd":
        st.push("store", -1, x)
    with pytest.raises(OverflowError, match="more than 4 symbols"):
        st.push("store", -1, "e")
    with pytest.raises(ValueError, match="level base b must be >= 2"):
        LayeredQueueStack(Clock(), 1, 1, [0], [[DUMMY] * 2])
    with pytest.raises(ValueError, match="one queue id and one cell list per level"):
        LayeredQueueStack(Clock(), 2, 2, [0], [[DUMMY] * 4])
    with pytest.raises(ValueError, match="lengths 2 b"):
        LayeredQueueStack(Clock(), 2, 1, [0], [[DUMMY] * 3])


def test_clock_wait_and_op():
    c = Clock(record=True)
    c.wait_for(3, 8)
    assert c.t == 3
    c.wait_for(3, 8)
    assert c.t == 3
    assert c.op("delta") == 3 and c.t == 4
    c.wait_for(1, 4)
    assert c.t == 5
    assert c.ops == [(3, ("delta", -1, -1))]


# ----------------------------------------------------------------------------- simulators vs the TM
@pytest.mark.parametrize("name", list(MACHINES))
@pytest.mark.parametrize("k_prime", [1, 2, 3])
def test_queue_simulator_matches_tm_step_by_step(name, k_prime):
    tm = MACHINES[name]()
    rng = random.Random(len(name) + k_prime)
    for w in words(rng, n_max=30) + ["0110", "10101"]:
        ref = run_reference(tm, w)
        sim = QueueSimulator(tm, 64, k_prime).run(w, max_steps=20_000)
        assert sim.configs == ref
        assert len(sim.step_ticks) == len(ref) - 1
        assert sim.state == ref[-1][0]


@pytest.mark.parametrize("name", list(MACHINES))
def test_single_queue_matches_tm_and_costs_two_rotations(name):
    tm = MACHINES[name]()
    for w in words(random.Random(3), n_max=20):
        sim = SingleQueueSimulator(tm, 30).run(w, max_steps=20_000)
        assert sim.configs == run_reference(tm, w)
        assert set(sim.step_ticks) <= {2 * 32 + 1}                 # two rotations of the 32-cell ring + delta
        assert sim.state == run_reference(tm, w)[-1][0]
        assert sim.ticks == sum(sim.step_ticks) + 32               # the executed ticks, with the halting read


def test_opcode_log_only_when_recording():
    tm = binary_increment()
    assert QueueSimulator(tm, 16, 2).run("1").clock.ops == []
    ops = QueueSimulator(tm, 16, 2, record=True).run("1").clock.ops
    assert ops and {op[0] for _, op in ops} >= {"load", "head", "delta", "write"}


def test_queue_simulator_geometry():
    sim = QueueSimulator(copy_machine(), 729, 3)
    assert sim.b == 9
    assert sim.queue_lengths == [18, 162, 1458] * 4             # 2 tapes x 2 stacks x 3 levels, 2 b^i
    assert sim.window == 2 * 9 ** 3 + 1
    assert QueueSimulator(copy_machine(), 64, 2).queue_lengths == [16, 128] * 4
    assert QueueSimulator(binary_increment(), 2, 1).b == 2


def test_simulators_reject_bad_input():
    tm = copy_machine()
    with pytest.raises(TypeError, match="tm must be a TuringMachine, got str"):
        QueueSimulator("copy", 64, 2)
    with pytest.raises(ValueError, match="space bound s must be an integer >= 2"):
        QueueSimulator(tm, 1, 2)
    with pytest.raises(ValueError, match="space bound s must be an integer >= 2"):
        QueueSimulator(tm, 2.5, 2)
    with pytest.raises(ValueError, match=r"k_prime \(levels per stack\) must be an integer >= 1"):
        QueueSimulator(tm, 64, 0)
    with pytest.raises(ValueError, match=r"k_prime \(levels per stack\) must be an integer >= 1"):
        QueueSimulator(tm, 64, True)
    with pytest.raises(ValueError, match="not in the alphabet"):
        SingleQueueSimulator(tm, 16).run("0a")
    with pytest.raises(ValueError, match="queue_lengths must be integers"):
        QueueMachineTransformer(tm, [8.7, 32])
    with pytest.raises(ValueError, match="exceeds the space bound s=4"):
        QueueSimulator(tm, 4, 1).run("01010")
    with pytest.raises(TypeError, match="tm must be a TuringMachine, got list"):
        SingleQueueSimulator([], 10)
    with pytest.raises(ValueError, match="space bound s must be an integer >= 2"):
        SingleQueueSimulator(tm, 1)
    with pytest.raises(ValueError, match="space bound s must be an integer >= 2"):
        SingleQueueSimulator(tm, 8.0)
    with pytest.raises(ValueError, match=r"exceeds the space bound s - 2 = 3"):
        SingleQueueSimulator(tm, 5).run("0101")
    loop = TuringMachine("loop", 1, ("a",), ("0", BLANK), "a", {("a", (BLANK,)): ("a", (BLANK,), (1,))})
    with pytest.raises(OverflowError, match=r"a head left the s=4 cells of the queue \(right end\)"):
        SingleQueueSimulator(loop, 4).run("")
    left = TuringMachine("left", 1, ("a",), ("0", BLANK), "a", {("a", (BLANK,)): ("a", (BLANK,), (-1,))})
    with pytest.raises(OverflowError, match=r"a head left the s=6 cells of the queue \(left end\)"):
        SingleQueueSimulator(left, 6).run("")
    with pytest.raises(RuntimeError, match="did not halt within max_steps=5"):
        SingleQueueSimulator(loop, 40).run("", max_steps=5)
    with pytest.raises(RuntimeError, match="did not halt within max_steps=5"):
        QueueSimulator(loop, 40, 2).run("", max_steps=5)
    with pytest.raises(OverflowError, match=r"stack overflow: more than 8 symbols \(raise s\)"):
        QueueSimulator(loop, 4, 1).run("")


def test_overhead_exponents_follow_the_bound():
    """Ticks per TM step: ~s^(1/k') for the layered queues, ~s for the single queue."""
    tm = copy_machine()
    rng = random.Random(0)
    S = [64, 729, 4096]
    ov = {k: [] for k in (1, 2, 3)}
    base = []
    for s in S:
        w = "".join(rng.choice("01") for _ in range(s // 2 - 2))
        for k in ov:
            ov[k].append(overhead_per_step(QueueSimulator(tm, s, k).run(w, snapshots=False)))
        if s <= 729:                                               # tick by tick: larger s is slow
            base.append(overhead_per_step(SingleQueueSimulator(tm, s).run(w, snapshots=False)))
    assert 0.9 < loglog_slope(S, ov[1]) < 1.1
    assert 0.42 < loglog_slope(S, ov[2]) < 0.6
    assert 0.28 < loglog_slope(S, ov[3]) < 0.45
    assert base == [2 * 66 + 1, 2 * 731 + 1]
    assert 0.98 < loglog_slope(S[:2], base) < 1.0


def test_slope_and_overhead_helpers():
    assert loglog_slope([10, 100, 1000], [3 * 10 ** 0.5, 3 * 100 ** 0.5, 3 * 1000 ** 0.5]) == pytest.approx(0.5)
    assert loglog_slope([2, 8], [5, 5]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="at least two"):
        loglog_slope([2], [3])
    with pytest.raises(ValueError, match="must not all be equal"):
        loglog_slope([2, 2], [3, 4])
    with pytest.raises(ValueError, match="must be finite and > 0"):
        loglog_slope([2, 4], [3, float("nan")])
    with pytest.raises(ValueError, match="must be finite and > 0"):
        loglog_slope([2, 4], [3, 0])
    sim = QueueSimulator(binary_increment(), 16, 2).run("1")
    assert overhead_per_step(sim) == sum(sim.step_ticks) / len(sim.step_ticks)
    sim.step_ticks = []
    with pytest.raises(ValueError, match="made no TM step"):
        overhead_per_step(sim)


# ----------------------------------------------------------------------------- the transformer
def run_net(tm, w, s, k_prime, layers):
    sim = QueueSimulator(tm, s, k_prime, record=True).run(w)
    net = QueueMachineTransformer(tm, sim.queue_lengths, layers=layers)
    toks = net.run(sim.prompt_cells, sim.clock.ops, sim.clock.t)
    return sim, net, toks


@pytest.mark.parametrize("name,w,k_prime,layers", [("binary_increment", "1011", 2, 1), ("binary_increment", "111", 3, 2),
                                                    ("copy", "0110", 2, 3), ("palindrome", "0110", 2, 2),
                                                    ("palindrome", "011", 3, 1)])
def test_transformer_runs_the_machine_step_by_step(name, w, k_prime, layers):
    tm = MACHINES[name]()
    ref = run_reference(tm, w)
    sim, net, toks = run_net(tm, w, 16, k_prime, layers)
    assert toks.shape[0] == max(sim.queue_lengths) + sim.clock.t      # one token per tick (CoT step)
    assert len(sim.step_end) == len(ref)
    for i, end in enumerate(sim.step_end):
        got = (net.state_at(toks, end), sim.decode(net.queue_cells(toks, end), sim.step_layouts[i]))
        assert got == ref[i], f"step {i}"
    assert torch.all((toks == 0) | (toks == 1))                      # exact one-hot codes throughout
    assert torch.all(toks.sum(1) == net.K + 1 + 1 + 3 * tm.tapes)    # one symbol per field


def test_transformer_queue_cells_equal_simulator_cells():
    tm = palindrome_machine()
    sim, net, toks = run_net(tm, "10101", 16, 2, 1)
    assert net.queue_cells(toks, sim.clock.t) == sim.cells


def test_transformer_attention_reads_fixed_offsets():
    tm = binary_increment()
    net = QueueMachineTransformer(tm, [3, 6], layers=2)
    X = torch.eye(net.d_token)[: 9].clone() if net.d_token >= 9 else None
    X = torch.zeros(9, net.d_token)
    X[torch.arange(9), torch.arange(9) % net.d_token] = 1.0
    reads = net.attend(X)
    assert torch.equal(reads[0], X[8]) and torch.equal(reads[1], X[6]) and torch.equal(reads[2], X[3])
    assert net.head_layer == [0, 1, 0]
    assert net.offsets.tolist() == [1, 3, 6] and net.window == 7
    with pytest.raises(ValueError, match="reaches before the sequence start"):
        net.attend(X[:4])


def test_transformer_ffn_holds_delta():
    """A delta tick writes delta(state, heads) into the token for every table entry."""
    tm = palindrome_machine()
    net = QueueMachineTransformer(tm, [4, 8], layers=1)
    G, k = len(net.gamma), tm.tapes
    for (q, read), (q2, wr, mv) in tm.delta.items():
        prev = net.prompt([[DUMMY] * 4, [DUMMY] * 8], state=q)[-1].clone()
        prev[net.sl["heads"]] = 0
        for t, a in enumerate(read):
            prev[net.sl["heads"].start + t * G + net.gamma.index(a)] = 1.0
        fronts = torch.zeros(2, len(net.vocab))
        fronts[:, -1] = 1.0
        out = net.ffn(net.encode_op(("delta", -1, -1)), prev, fronts)
        assert net.states[int(out[net.sl["state"]].argmax())] == q2
        assert [net.gamma[int(i)] for i in out[net.sl["writes"]].view(k, G).argmax(1)] == list(wr)
        assert [(-1, 0, 1)[int(i)] for i in out[net.sl["moves"]].view(k, 3).argmax(1)] == list(mv)
        keep = net.ffn(net.encode_op(("keep", -1, -1)), prev, fronts)
        assert torch.equal(keep[net.sl["state"]], prev[net.sl["state"]])


def test_transformer_ffn_opcodes():
    tm = binary_increment()
    net = QueueMachineTransformer(tm, [2, 4], layers=1)
    V, G = len(net.vocab), len(net.gamma)
    prev = net.prompt([[DUMMY] * 2, [DUMMY] * 4])[-1].clone()
    fronts = torch.zeros(2, V)
    fronts[0, net.vocab.index("1")] = 1.0
    fronts[1, net.vocab.index("0")] = 1.0
    sym = lambda out, j: net.vocab[int(out[net.sl["push"]].view(2, V)[j].argmax())]
    reg = lambda out: net.gamma[int(out[net.sl["reg"]].argmax())]
    out = net.ffn(net.encode_op(("load", 0, -1)), prev, fronts)
    assert (sym(out, 0), sym(out, 1), reg(out)) == (DUMMY, "0", "1")
    out2 = net.ffn(net.encode_op(("store", 1, -1)), out, fronts)
    assert (sym(out2, 0), sym(out2, 1), reg(out2)) == ("1", "1", "1")
    out3 = net.ffn(net.encode_op(("copy", 1, 0)), prev, fronts)
    assert (sym(out3, 0), sym(out3, 1)) == (DUMMY, "1")
    out4 = net.ffn(net.encode_op(("blank", -1, -1)), out, fronts)
    assert reg(out4) == BLANK and sym(out4, 0) == "1"
    out5 = net.ffn(net.encode_op(("head", -1, 0)), out, fronts)
    assert net.gamma[int(out5[net.sl["heads"]].argmax())] == "1"
    prev_w = prev.clone()
    prev_w[net.sl["writes"]] = 0
    prev_w[net.sl["writes"].start + net.gamma.index("0")] = 1.0
    out6 = net.ffn(net.encode_op(("write", 0, 0)), prev_w, fronts)
    assert (sym(out6, 0), sym(out6, 1)) == ("0", "0")
    for o in (out, out2, out3, out4, out5, out6):
        assert torch.all(o.view(-1)[net.sl["push"]].view(2, V).sum(1) == 1)


def test_transformer_state_dict_round_trip_and_no_grad():
    tm = copy_machine()
    a = QueueMachineTransformer(tm, [4, 8, 4, 8], layers=2)
    b = QueueMachineTransformer(tm, [4, 8, 4, 8], layers=2)
    b.delta_out.weight.data.zero_()
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert not any(p.requires_grad for p in a.parameters())


def test_transformer_rejects_bad_input():
    tm = binary_increment()
    with pytest.raises(TypeError, match="tm must be a TuringMachine, got dict"):
        QueueMachineTransformer({}, [2])
    with pytest.raises(ValueError, match="queue_lengths must be a non-empty list"):
        QueueMachineTransformer(tm, [])
    with pytest.raises(ValueError, match="queue_lengths must be a non-empty list"):
        QueueMachineTransformer(tm, [0, 2])
    with pytest.raises(ValueError, match=r"layers must be an integer in \[1, 3\]"):
        QueueMachineTransformer(tm, [2, 4], layers=4)
    with pytest.raises(ValueError, match=r"layers must be an integer in \[1, 3\]"):
        QueueMachineTransformer(tm, [2, 4], layers=0)
    net = QueueMachineTransformer(tm, [2, 4])
    with pytest.raises(ValueError, match="unknown opcode kind 'jump'; allowed: keep, load"):
        net.encode_op(("jump", 0, 0))
    with pytest.raises(ValueError, match=r"cells must be 2 lists of lengths \[2, 4\]"):
        net.prompt([[DUMMY] * 2])
    with pytest.raises(ValueError, match=r"opcode ticks must lie in \[0, 3\)"):
        net.run([[DUMMY] * 2, [DUMMY] * 4], [(3, ("keep", -1, -1))], 3)


# ----------------------------------------------------------------------------- experiment
def test_experiment_smoke():
    from iclr26.architectures.tm_simulation.experiment import ARMS, make_input, run, simulate
    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["simulator_exact"]) == set(ARMS) and all(v == [1.0] * 6 for v in m["simulator_exact"].values())
    assert m["transformer_exact"]["transformer"] == [1.0] * 3
    loc = m["local_exponent"]
    assert len(loc["levels2"]) == len(loc["levels3"]) == 3            # 3 machines x 1 draw x 1 pair
    assert all(a < b < 0.7 for a, b in zip(loc["levels3"], loc["levels2"]))
    assert m["local_exponent_vs_single"]["levels2"] == loc["levels2"]  # same inputs and bounds at smoke
    assert all(v == pytest.approx(math.log(1463 / 133) / math.log(729 / 64))
               for v in m["local_exponent_vs_single"]["single_queue"])
    f = out["info"]["fitted_exponent_mean"]
    assert f["single_queue"] > 0.95 and f["levels3"] < f["levels2"] < 0.7
    w = make_input("palindrome", 9, random.Random(1))
    assert len(w) == 9
    with pytest.raises(ValueError, match="unknown arm 'x'"):
        simulate("x", copy_machine(), 64)
    with pytest.raises(ValueError, match="input length n must be >= 0"):
        make_input("copy", -1, random.Random(0))


def test_local_exponents_hand_values_and_rejections():
    from iclr26.architectures.tm_simulation.experiment import local_exponents
    assert local_exponents([10, 100, 1000], [2.0, 20.0, 20.0]) == pytest.approx([1.0, 0.0])
    assert local_exponents([4, 16], [3.0, 6.0]) == pytest.approx([0.5])
    with pytest.raises(ValueError, match="at least two"):
        local_exponents([4], [3.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        local_exponents([4, 16], [3.0, float("nan")])
    with pytest.raises(ValueError, match="strictly increasing"):
        local_exponents([16, 4], [3.0, 6.0])


def test_transformer_matches_can_fail(monkeypatch):
    """The exactness check of the experiment compares the transformer's own tokens with the reference:
    one corrupted token (the control's state field at one tick) makes it False."""
    from iclr26.architectures.tm_simulation import experiment as E
    tm = binary_increment()
    assert E.transformer_matches(tm, "1", 16, 2, 2)
    orig = QueueMachineTransformer.forward
    calls = {"n": 0}

    def corrupt(self, X, op):
        out = orig(self, X, op)
        calls["n"] += 1
        if op[0] == "delta":
            sl = self.sl["state"]
            out = out.clone()
            out[sl] = out[sl].roll(1)
        return out

    monkeypatch.setattr(QueueMachineTransformer, "forward", corrupt)
    assert not E.transformer_matches(tm, "1", 16, 2, 2)
    assert calls["n"] > 0


def test_transformer_run_checks_the_networks_own_moves(monkeypatch):
    """A run that makes level moves matches; reversing the moves the FFN holds makes it fail."""
    tm = copy_machine()
    ok, copies = E.transformer_run(tm, "0110101", 16, 2, 2)
    assert ok and copies > 0
    orig = QueueMachineTransformer.moves_at
    monkeypatch.setattr(QueueMachineTransformer, "moves_at",
                        lambda self, tok, t: tuple(-m for m in orig(self, tok, t)))
    assert not E.transformer_run(tm, "0110101", 16, 2, 2)[0]


def test_palindrome_draw_keeps_its_type():
    rng = random.Random(3)
    for n in (5, 8, 31):
        w = E.make_input("palindrome", n, rng, palindrome=True)
        assert w == w[::-1] and len(w) == n
