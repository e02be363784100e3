"""Tests of Game-RL / Code2Logic (arXiv:2505.13886): game engines against hand-worked positions and
independent references, the data engine's exact answers, the verifier and the GRPO reward."""
from __future__ import annotations

import numpy as np
import pytest

from iclr26.posttraining.game_rl import (ENGINES, TEMPLATES, Code2LogicGenerator, LangtonAntEngine, LifeEngine,
                                         MazeEngine, SnakeEngine, SokobanEngine, TaskTemplate, extract_choice,
                                         generator_for, is_correct, verifiable_reward)
from iclr26.posttraining.game_rl.generator import LETTERS, format_value


def _walls(n, extra=()):
    return sorted({(r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1)} | set(extra))


# ------------------------------------------------------------------- Sokoban (the official game's move)
def test_sokoban_move_push_and_blocks():
    e = SokobanEngine()
    s = dict(n=6, player=(2, 1), boxes=[(2, 2)], walls=_walls(6, [(3, 3)]))
    t = e.step(s, "R")                                     # push the box one cell
    assert t["player"] == (2, 2) and t["boxes"] == [(2, 3)]
    assert s["player"] == (2, 1) and s["boxes"] == [(2, 2)]   # input untouched
    t2 = e.step(t, "R")
    assert t2["player"] == (2, 3) and t2["boxes"] == [(2, 4)]
    t3 = e.step(t2, "R")                                   # box against the wall: blocked
    assert t3["player"] == (2, 3) and t3["boxes"] == [(2, 4)]
    assert e.step(s, "U")["player"] == (1, 1)
    assert e.step(e.step(s, "U"), "U")["player"] == (1, 1)   # wall
    two = dict(n=6, player=(1, 1), boxes=[(1, 2), (1, 3)], walls=_walls(6))
    assert e.step(two, "R") == two                          # box behind box: blocked
    assert e.step(dict(n=6, player=(3, 2), boxes=[], walls=_walls(6, [(3, 3)])), "R")["player"] == (3, 2)
    assert e.render_text(s).splitlines()[2] == "#@$..#"
    assert e.render_text(s).splitlines()[3] == "#..#.#"


def test_sokoban_sample_is_consistent():
    e = SokobanEngine()
    for lvl in (1, 3):
        s = e.sample_state(np.random.default_rng(lvl), lvl)
        assert s["n"] == 4 + lvl and len(s["boxes"]) == lvl
        occupied = [tuple(s["player"])] + [tuple(b) for b in s["boxes"]]
        assert len(set(occupied)) == len(occupied) and not set(occupied) & set(map(tuple, s["walls"]))
        assert sum(ch == "$" for ch in e.render_text(s)) == lvl and e.render_text(s).count("@") == 1


# ------------------------------------------------------------------- Maze: BFS vs an independent reference
def test_maze_shortest_path_against_scipy():
    from scipy.sparse import lil_matrix
    from scipy.sparse.csgraph import shortest_path

    e = MazeEngine()
    rng = np.random.default_rng(0)
    for _ in range(25):
        s = e.sample_state(rng, 2)
        n, walls = s["n"], set(map(tuple, s["walls"]))
        g = lil_matrix((n * n, n * n))
        for r in range(n):
            for c in range(n):
                for dr, dc in ((0, 1), (1, 0)):
                    r2, c2 = r + dr, c + dc
                    if r2 < n and c2 < n and (r, c) not in walls and (r2, c2) not in walls:
                        g[r * n + c, r2 * n + c2] = g[r2 * n + c2, r * n + c] = 1
        d = shortest_path(g.tocsr(), unweighted=True, indices=s["pos"][0] * n + s["pos"][1])
        assert e.shortest_path(s) == int(d[s["exit"][0] * n + s["exit"][1]])
    blocked = dict(n=3, walls=[(0, 1), (1, 1), (2, 1)], pos=(0, 0), exit=(0, 2))
    assert e.shortest_path(blocked) is None
    assert e.step(dict(n=3, walls=[], pos=(0, 0), exit=(2, 2)), "U")["pos"] == (0, 0)   # board edge
    assert e.render_text(blocked) == "S#E\n.#.\n.#."


# ------------------------------------------------------------------- Langton's ant: hand-worked steps
def test_langton_ant_hand_steps_on_white_board():
    e = LangtonAntEngine()
    s = dict(n=5, black=[], ant=(2, 2), heading="U")
    states = e.rollout(s, [None] * 5)
    assert [t["ant"] for t in states] == [(2, 3), (3, 3), (3, 2), (2, 2), (2, 1)]
    assert [t["heading"] for t in states] == ["R", "D", "L", "U", "L"]
    # after 4 right turns the ant is home; its cell is black and the 5th step turns left and clears it
    assert (2, 2) not in set(map(tuple, states[4]["black"])) and len(states[4]["black"]) == 3
    wrap = e.step(dict(n=4, black=[], ant=(0, 3), heading="U"))          # right turn off the edge wraps
    assert wrap["ant"] == (0, 0) and wrap["heading"] == "R"
    left = e.step(dict(n=4, black=[(1, 1)], ant=(1, 1), heading="U"))
    assert left["ant"] == (1, 0) and left["heading"] == "L" and left["black"] == []
    assert e.render_text(dict(n=2, black=[(0, 1)], ant=(1, 0), heading="D")) == ".#\n..\nAnt at (1, 0) facing D."


# ------------------------------------------------------------------- Life: vs a convolution reference
def test_life_against_convolution_reference_and_oscillators():
    from scipy.signal import convolve2d

    e = LifeEngine()
    rng = np.random.default_rng(3)
    for _ in range(20):
        s = e.sample_state(rng, 3)
        a = np.zeros((s["n"], s["n"]), int)
        for r, c in s["live"]:
            a[r, c] = 1
        k = convolve2d(a, np.ones((3, 3), int), mode="same") - a
        ref = ((k == 3) | ((a == 1) & (k == 2))).astype(int)
        got = np.zeros_like(a)
        for r, c in e.step(s)["live"]:
            got[r, c] = 1
        assert (got == ref).all()
    blinker = dict(n=5, live=[(2, 1), (2, 2), (2, 3)])
    assert sorted(e.step(blinker)["live"]) == [(1, 2), (2, 2), (3, 2)]
    assert sorted(e.step(e.step(blinker))["live"]) == blinker["live"]
    block = dict(n=4, live=[(1, 1), (1, 2), (2, 1), (2, 2)])
    assert sorted(e.step(block)["live"]) == block["live"]
    corner = dict(n=3, live=[(0, 0), (0, 1), (1, 0)])           # outside is dead: (1, 1) is born
    assert sorted(e.step(corner)["live"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]


# ------------------------------------------------------------------- Snake (held-out game)
def test_snake_moves_growth_and_death():
    e = SnakeEngine()
    s = dict(n=5, body=[(2, 2), (2, 1)], food=(1, 2), alive=True)
    t = e.step(s, "U")                                          # eats: grows by one
    assert t["body"] == [(1, 2), (2, 2), (2, 1)] and t["alive"]
    t = e.step(t, "R")
    assert t["body"] == [(1, 3), (1, 2), (2, 2)]
    assert e.step(s, "L")["body"] == [(2, 3), (2, 2)]           # back into the neck: keep heading (R)
    assert e.step(s, "D")["body"] == [(3, 2), (2, 2)]
    edge = dict(n=3, body=[(0, 1), (1, 1)], food=(2, 2), alive=True)
    dead = e.step(edge, "U")
    assert not dead["alive"] and dead["body"] == edge["body"] and e.step(dead, "L") == dead
    loop = dict(n=5, body=[(1, 1), (1, 2), (2, 2), (2, 1), (3, 1)], food=(4, 4), alive=True)
    assert not e.step(loop, "D")["alive"]                        # bites its own body
    tail = dict(n=5, body=[(1, 1), (1, 2), (2, 2), (2, 1)], food=(4, 4), alive=True)
    assert e.step(tail, "D")["alive"]                            # the tail moves away first
    assert e.render_text(s) == ".....\n..*..\n.oH..\n.....\n....."


def test_engine_rejections():
    with pytest.raises(ValueError, match=r"level must be an integer in 1..5, got 0"):
        SokobanEngine().sample_state(np.random.default_rng(0), 0)
    with pytest.raises(ValueError, match=r"level must be an integer in 1..5"):
        MazeEngine().size(True)
    with pytest.raises(ValueError, match=r"action must be one of \['D', 'L', 'R', 'U'\], got 'X'"):
        SokobanEngine().step(dict(n=5, player=(2, 2), boxes=[], walls=_walls(5)), "X")
    with pytest.raises(ValueError, match="action must be one of"):
        SnakeEngine().step(dict(n=5, body=[(2, 2)], food=(0, 0), alive=True), None)


# ------------------------------------------------------------------- the data engine
@pytest.mark.parametrize("game", sorted(ENGINES))
def test_generator_answers_are_exact_and_balanced(game):
    gen = generator_for(game)
    recs = gen.generate(40, 2, seed=5)
    assert recs == gen.generate(40, 2, seed=5)                  # deterministic
    assert recs != gen.generate(40, 2, seed=6)
    assert all(gen.verify(r) for r in recs)
    assert {r["answer"] for r in recs} == set("ABCD")            # the right letter moves around
    for r in recs:
        assert len(r["options"]) == 4 == len(set(r["options"]))
        assert r["options"][LETTERS.index(r["answer"])] == r["value"]
        assert r["prompt"].endswith("\nAnswer:") and r["question"] in r["prompt"]
        assert f"{r['answer']}. {r['value']}" in r["question"]
        assert ENGINES[game].render_text(r["state"]) in r["question"]
        assert r["analysis"] and r["game"] == game and r["level"] == 2


def test_generator_answers_match_hand_simulation():
    # Sokoban: replay the moves with an independent walker (no engine call)
    for r in generator_for("sokoban").generate(30, 3, seed=1):
        s = r["state"]
        walls, boxes, (pr, pc) = set(map(tuple, s["walls"])), set(map(tuple, s["boxes"])), s["player"]
        for m in r["params"]["moves"]:
            dr, dc = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}[m]
            t = (pr + dr, pc + dc)
            if t in walls:
                continue
            if t in boxes:
                b = (t[0] + dr, t[1] + dc)
                if b in walls or b in boxes:
                    continue
                boxes = (boxes - {t}) | {b}
            pr, pc = t
        assert r["value"] == f"({pr}, {pc})"
        assert len(r["params"]["moves"]) == 4 and r["analysis"][-1] == f"So the player ends at ({pr}, {pc})."
    for r in generator_for("life").generate(10, 1, seed=2):
        assert int(r["value"]) == len(LifeEngine().step(r["state"])["live"])
    for r in generator_for("langton_ant").generate(10, 2, seed=2):
        assert r["params"]["steps"] == 3 and len(r["analysis"]) == 3
        assert r["analysis"][-1].endswith(f"move to {r['value']}")


def test_snake_questions_keep_the_snake_alive_and_levels_grow():
    gen = generator_for("snake")
    for r in gen.generate(30, 3, seed=0):
        s = r["state"]
        for m in r["params"]["moves"]:
            d = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}[m]
            assert (s["body"][0][0] + d[0], s["body"][0][1] + d[1]) != tuple(s["body"][1])   # never into the neck
            s = SnakeEngine().step(s, m)
            assert s["alive"] and s["body"][0] != s["body"][1]
        assert format_value(s["body"][0]) == r["value"]
    easy, hard = gen.generate(5, 1, seed=0), gen.generate(5, 3, seed=0)
    assert all(r["state"]["n"] == 4 and len(r["params"]["moves"]) == 2 for r in easy)
    assert all(r["state"]["n"] == 6 and len(r["params"]["moves"]) == 4 for r in hard)
    assert all(len(r["state"]["body"]) == 2 for r in easy) and all(len(r["state"]["body"]) == 3 for r in hard)
    assert MazeEngine().size(2) == 5 and LifeEngine().size(5) == 8 and SokobanEngine().size(2) == 6


def test_verify_catches_a_wrong_record():
    gen = generator_for("maze")
    r = dict(gen.generate(1, 1, seed=0)[0])
    wrong = next(x for x in LETTERS[:4] if x != r["answer"])
    assert gen.verify(r) and not gen.verify(dict(r, answer=wrong)) and not gen.verify(dict(r, answer="H"))
    with pytest.raises(ValueError, match="record task 'nope' is not one of this generator's templates"):
        gen.verify(dict(r, task="nope"))


def test_custom_template_and_option_count():
    e = MazeEngine()
    t = TaskTemplate("open_cells", "Maze:\n{board}\nOpen cells?", lambda e, s, rng, lv: {},
                     lambda e, s, p: s["n"] ** 2 - len(s["walls"]), lambda e, s, p: ["count"],
                     lambda e, s, p, a: [a + k for k in range(-4, 5)], n_options=6)
    recs = Code2LogicGenerator(e, [t]).generate(12, 1, seed=0)
    assert all(len(r["options"]) == 6 and r["answer"] in "ABCDEF" for r in recs)
    assert all(int(r["value"]) == 16 - len(r["state"]["walls"]) for r in recs)
    thin = TaskTemplate("t", "{board}", lambda e, s, rng, lv: {}, lambda e, s, p: 1, lambda e, s, p: [],
                        lambda e, s, p, a: [1, 2], n_options=4)
    with pytest.raises(RuntimeError, match="gave 1 distinct distractors, needs 3"):
        Code2LogicGenerator(e, [thin]).generate(1, 1, seed=0)


def test_generator_rejections():
    with pytest.raises(ValueError, match=r"n_options must be an integer in 2..8, got 9"):
        TaskTemplate("t", "{board}", lambda *a: {}, lambda *a: 0, lambda *a: [], lambda *a: [], n_options=9)
    with pytest.raises(ValueError, match=r"n_options must be an integer in 2..8, got 1"):
        TaskTemplate("t", "{board}", lambda *a: {}, lambda *a: 0, lambda *a: [], lambda *a: [], n_options=1)
    with pytest.raises(TypeError, match="TaskTemplate.answer_fn must be callable"):
        TaskTemplate("t", "{board}", lambda *a: {}, 3, lambda *a: [], lambda *a: [])
    with pytest.raises(TypeError, match="engine must be a GameEngine, got str"):
        Code2LogicGenerator("maze", TEMPLATES["maze"])
    with pytest.raises(TypeError, match="non-empty sequence of TaskTemplate"):
        Code2LogicGenerator(MazeEngine(), [])
    with pytest.raises(ValueError, match="n must be a non-negative integer, got -1"):
        generator_for("maze").generate(-1)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        generator_for("maze").generate(2, seed=-3)
    with pytest.raises(ValueError, match=r"unknown game 'chess'; choose one of \['langton_ant'"):
        generator_for("chess")
    assert generator_for("maze").generate(0) == []


# ------------------------------------------------------------------- verifier and reward
def test_extract_choice():
    assert extract_choice(" B") == "B" and extract_choice("C. (1, 2)") == "C" and extract_choice("(D)") == "D"
    assert extract_choice("Answer: A") == "A" and extract_choice("answer: b") == "B"
    assert extract_choice("I think the answer is C.") == "C"
    assert extract_choice("the answer is A, no, the answer is D") == "D"
    assert extract_choice(" b") is None and extract_choice(" 4") is None and extract_choice("") is None
    assert extract_choice("Because") is None and extract_choice(" I") is None


def test_verifiable_reward_trl_convention():
    comps = [" B", " C", [{"role": "assistant", "content": "Answer: C"}], "nothing"]
    out = verifiable_reward(prompts=["p"] * 4, completions=comps, answer=["B", "B", "C", "A"],
                            completion_ids=[[1]] * 4, game=["maze"] * 4)
    assert out == [1.0, 0.0, 1.0, 0.0]
    assert is_correct(" a", "A") is False and is_correct("(A)", " a")
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        verifiable_reward(completions=[" A", " B"], answer=["A"])
    with pytest.raises(ValueError, match="needs completions and answer"):
        verifiable_reward(completions=[" A"])
    with pytest.raises(ValueError, match=r"answer must be one option letter in 'ABCDEFGH', got '12'"):
        is_correct(" A", "12")
    with pytest.raises(TypeError, match="a completion must be a string or a list of chat messages, got int"):
        is_correct(3, "A")


def test_format_value():
    assert format_value((1, 2)) == "(1, 2)" and format_value(np.int64(3)) == "3" and format_value(True) == "yes"
    assert format_value([np.int64(0), 4]) == "(0, 4)" and format_value("x") == "x"


# ------------------------------------------------------------------- experiment data
def test_experiment_splits_are_disjoint_and_mixed():
    from iclr26.posttraining.game_rl import experiment as E

    cfg = dict(E.SCALES["quick"])
    d = E.data(cfg, 0)
    prompts = {k: {r["prompt"] for r in v} for k, v in d.items()}
    assert not prompts["extra"] & prompts["val"] and not prompts["sft"] & prompts["val"]
    assert not (prompts["sft"] | prompts["extra"]) & prompts["hard"]
    assert {r["game"] for r in d["heldout"]} == {"snake"}
    assert not {r["game"] for r in d["sft"] + d["extra"] + d["val"] + d["hard"]} & {"snake"}
    assert {r["level"] for r in d["hard"]} == {3} and {r["level"] for r in d["sft"]} == {1}
    assert len(d["extra"]) == cfg["steps"] * cfg["prompts_per_step"]
    assert E.sft_rows(d["sft"][:1]) == [{"prompt": d["sft"][0]["prompt"], "completion": " " + d["sft"][0]["answer"]}]
    assert d["sft"] != E.data(cfg, 1)["sft"]


@pytest.mark.slow
def test_quick_claim_check_runs():
    from iclr26.posttraining.game_rl import experiment as E

    out = E.run("quick", 0)
    assert len(out["metrics"]["heldout_correct"]["game_rl"]) == E.SCALES["quick"]["n_heldout"]


# ------------------------------------------------------------------- exact texts and edge moves
def test_maze_and_snake_edge_moves():
    e = MazeEngine()
    s = dict(n=3, walls=[(1, 2)], pos=(1, 1), exit=(0, 0))
    assert e.step(s, "R")["pos"] == (1, 1) and e.step(s, "L")["pos"] == (1, 0)
    assert e.step(e.step(s, "L"), "L")["pos"] == (1, 0) and e.step(s, "D")["pos"] == (2, 1)
    assert e.step(dict(s, pos=(1, 0)), "U")["pos"] == (0, 0) and e.step(dict(s, pos=(2, 2)), "R")["pos"] == (2, 2)
    sn = SnakeEngine()
    assert sn.step(dict(n=5, body=[(1, 2), (1, 3)], food=(4, 4), alive=True), "R")["body"] == [(1, 1), (1, 2)]
    assert sn.step(dict(n=5, body=[(1, 2), (2, 2)], food=(4, 4), alive=True), "U")["body"] == [(0, 2), (1, 2)]
    assert sn.step(dict(n=5, body=[(2, 1), (2, 2)], food=(4, 4), alive=True), "L")["body"] == [(2, 0), (2, 1)]
    assert sn.step(dict(n=5, body=[(2, 0), (2, 1)], food=(4, 4), alive=True), "L")["alive"] is False
    assert sn.step(dict(n=5, body=[(4, 2), (3, 2)], food=(0, 0), alive=True), "D")["alive"] is False
    assert sn.step(dict(n=5, body=[(2, 4), (2, 3)], food=(0, 0), alive=True), "R")["alive"] is False
    assert sn.step(dict(n=5, body=[(3, 3)], food=(0, 0), alive=True), "D")["body"] == [(4, 3)]


def test_analysis_texts_exactly():
    from iclr26.posttraining.game_rl.generator import LANGTON_POSITION, SNAKE_HEAD, SOKOBAN_PLAYER

    s = dict(n=5, player=(1, 1), boxes=[(2, 2)], walls=_walls(5))
    assert SOKOBAN_PLAYER.analysis_fn(SokobanEngine(), s, dict(moves="UR")) == [
        "Move U: player (1, 1) -> (1, 1) (blocked)", "Move R: player (1, 1) -> (1, 2)", "So the player ends at (1, 2)."]
    sn = dict(n=5, body=[(2, 2), (2, 1)], food=(0, 0), alive=True)
    assert SNAKE_HEAD.analysis_fn(SnakeEngine(), sn, dict(moves="RD")) == [
        "Move R: head (2, 2) -> (2, 3)", "Move D: head (2, 3) -> (3, 3)", "So the head ends at (3, 3)."]
    ant = dict(n=5, black=[(2, 3)], ant=(2, 2), heading="U")
    assert LANGTON_POSITION.analysis_fn(LangtonAntEngine(), ant, dict(steps=2)) == [
        "Step 1: white cell (2, 2), turn to R, flip it, move to (2, 3)",
        "Step 2: black cell (2, 3), turn to U, flip it, move to (1, 3)"]
    assert TEMPLATES["maze"][0].analysis_fn(MazeEngine(), dict(n=2, walls=[], pos=(0, 0), exit=(1, 1)), {}) == [
        "Breadth-first search from S (0, 0) reaches E (1, 1) after 2 moves."]
    life = dict(n=3, live=[(1, 0), (1, 1), (1, 2)])
    assert TEMPLATES["life"][0].analysis_fn(LifeEngine(), life, {}) == [
        "3 live cells now; applying the rules cell by cell leaves 3 live cells."]


def test_distractor_helpers_and_question_layout():
    from iclr26.posttraining.game_rl.generator import _near_cells, _near_ints

    assert _near_ints(2, lo=1) == [1, 3, 4, 5, 6, 7] and _near_ints(0) == [1, 2, 3, 4, 5]
    assert _near_cells(3, (0, 0)) == [(0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]
    assert _near_cells(3, (1, 1), extra=[(9, 9)], radius=1) == [(9, 9), (0, 1), (1, 0), (1, 2), (2, 1)]
    r = generator_for("snake").generate(1, 1, seed=4)[0]
    head = format_value(r["state"]["body"][0])
    lines = r["prompt"].split("\n")
    assert lines[0] == "Snake (H head, o body, * food, . empty); rows, cols from 0."
    assert lines[-6] == f"Head at {head} moves {r['params']['moves']}. Head ends at?"
    assert lines[-5:] == [f"{x}. {o}" for x, o in zip("ABCD", r["options"])] + ["Answer:"]
    exact = TaskTemplate("t", "{board}", lambda e, s, rng, lv: {}, lambda e, s, p: 1, lambda e, s, p: [],
                         lambda e, s, p, a: [2, 3, 4], n_options=4)
    rec = Code2LogicGenerator(MazeEngine(), [exact]).generate(1, 1, seed=0)[0]   # exactly n - 1 distractors
    assert sorted(rec["options"]) == ["1", "2", "3", "4"]
    binary = TaskTemplate("b", "{board}", lambda e, s, rng, lv: {}, lambda e, s, p: True, lambda e, s, p: [],
                          lambda e, s, p, a: [False], n_options=2)
    assert sorted(Code2LogicGenerator(MazeEngine(), [binary]).generate(1, 1, seed=0)[0]["options"]) == ["no", "yes"]


def test_more_rejections_and_edge_parsing():
    with pytest.raises(TypeError, match=r"^templates must be a non-empty sequence of TaskTemplate$"):
        Code2LogicGenerator(MazeEngine(), [object()])
    with pytest.raises(ValueError, match=r"^verifiable_reward needs completions and answer"):
        verifiable_reward(answer=["A"])
    with pytest.raises(ValueError, match="n_options must be an integer"):
        TaskTemplate("t", "{board}", lambda *a: {}, lambda *a: 0, lambda *a: [], lambda *a: [], n_options=True)
    with pytest.raises(ValueError, match="n_options must be an integer"):
        TaskTemplate("t", "{board}", lambda *a: {}, lambda *a: 0, lambda *a: [], lambda *a: [], n_options=3.0)
    assert TaskTemplate("t", "{board}", lambda *a: {}, lambda *a: 0, lambda *a: [], lambda *a: [], n_options=2)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got True"):
        generator_for("maze").generate(1, seed=True)
    with pytest.raises(ValueError, match="n must be a non-negative integer, got 2.0"):
        generator_for("maze").generate(2.0)
    with pytest.raises(ValueError, match="answer must be one option letter"):
        is_correct(" A", "Z")
    with pytest.raises(ValueError, match="answer must be one option letter"):
        is_correct(" A", "AB")
    assert verifiable_reward(completions=[[{"content": " A"}, {"content": " B"}], [{"role": "x"}]],
                             answer=["B", "A"]) == [1.0, 0.0]
    with pytest.raises(TypeError, match="a completion must be a string or a list of chat messages"):
        is_correct([], "A")
    assert extract_choice("ANSWER: c") == "C" and extract_choice("Answer c") == "C"
    gen = generator_for("maze")
    r = gen.generate(1, 1, seed=0)[0]
    assert not gen.verify(dict(r, options=r["options"][:LETTERS.index(r["answer"])]))
    assert LETTERS.find("A") == 0 and gen.verify(dict(r, answer=r["answer"]))


def test_bounds_rollout_and_helpers():
    from iclr26.posttraining.game_rl.generator import _near_ints

    with pytest.raises(ValueError, match="level must be an integer in 1..5, got 6"):
        LifeEngine().size(6)
    assert LifeEngine().size(5) == 8
    e = SokobanEngine()
    s = dict(n=6, player=(2, 1), boxes=[(2, 2)], walls=_walls(6))
    states = e.rollout(s, "RDL")
    assert [t["player"] for t in states] == [(2, 2), (3, 2), (3, 1)] and states[0] == e.step(s, "R")
    assert _near_ints(5) == [4, 6, 3, 7, 2, 8, 9, 10]
    assert min(MazeEngine().shortest_path(MazeEngine().sample_state(np.random.default_rng(i), 1))
               for i in range(60)) == 2
    mk = lambda k, n: TaskTemplate("t", "{board}", lambda e, s, rng, lv: {}, lambda e, s, p: 0,  # noqa: E731
                                   lambda e, s, p: [], lambda e, s, p, a: list(range(1, k + 1)), n_options=n)
    assert len(Code2LogicGenerator(MazeEngine(), [mk(7, 8)]).generate(1, 1, seed=0)[0]["options"]) == 8
    with pytest.raises(RuntimeError, match="gave 2 distinct distractors, needs 3"):
        Code2LogicGenerator(MazeEngine(), [mk(2, 4)]).generate(1, 1, seed=0)
