"""A template mini benchmark in the PERSPECTRA schema, for checks without the release.

Ten debate topics written for this package, each with three pro and three con opinions (short
clauses). An opinion's "expanded" arguments are template renderings of its clause (none of them
concessive), so the counting and matching builders of :mod:`.tasks` run on it unchanged.

For the polarity check the mini benchmark adds paired framings of one argument (the writer's own
opinion, always last, and one opinion of the other side from the same topic):

- ``plain``: a neutral opening sentence, then the writer's opinion;
- ``concessive``: the other side's point conceded ("Although ..., ..."), then the writer's opinion;
- ``rebuttal``: the other side's point named and rejected, then the writer's opinion (the control:
  the same opposing content without concessive structure).

Every framing of a pair carries the same opinions and the same answer, so a framing effect cannot
come from the content.
"""
from __future__ import annotations

import numpy as np

from .dataset import parse
from .tasks import _positive_int, _rng

TOPICS = {
    "Cities should ban private cars from their centres.": (
        ["banning cars from city centres cuts air pollution where most people breathe it",
         "streets without cars are safer for children and cyclists",
         "car-free centres bring more foot traffic to small shops"],
        ["many elderly and disabled people depend on cars to reach the centre",
         "a ban pushes traffic jams onto the surrounding neighbourhoods",
         "delivery businesses in the centre would lose customers and money"]),
    "Homework should be abolished in primary schools.": (
        ["young children learn more from play and rest than from worksheets",
         "homework widens the gap between pupils whose parents can help and those whose parents cannot",
         "evenings without homework leave time for family and sport"],
        ["short homework builds habits of self-discipline early",
         "homework shows parents what their children are learning",
         "practice at home helps children master reading and arithmetic"]),
    "Voting should be compulsory.": (
        ["compulsory voting makes the result reflect the whole population",
         "when everyone votes, campaigns cannot win by mobilising only extremes",
         "compulsory voting raises turnout among poorer citizens"],
        ["forcing people to vote violates their freedom not to take part",
         "uninformed voters forced to the polls add random noise to the outcome",
         "fines for not voting fall hardest on people with the least money"]),
    "Zoos should be closed.": (
        ["wild animals suffer from living in small enclosures",
         "zoos teach visitors that caging animals is normal",
         "money spent on zoos would protect more animals in the wild"],
        ["zoos run breeding programmes that save endangered species",
         "seeing real animals makes children care about nature",
         "zoo research helps vets treat animals in the wild"]),
    "Social media platforms should verify the identity of every user.": (
        ["verified identities make people think twice before harassing others",
         "identity checks make it harder to run networks of fake accounts",
         "victims of online fraud could find the people who cheated them"],
        ["anonymous accounts protect whistleblowers and dissidents",
         "collecting identity documents creates a huge target for data thieves",
         "many people lack the official documents that verification would require"]),
    "Nuclear power should replace coal.": (
        ["nuclear plants emit almost no carbon dioxide while running",
         "nuclear power delivers steady electricity regardless of the weather",
         "coal smoke kills far more people every year than nuclear accidents"],
        ["nuclear waste stays dangerous for thousands of years",
         "new nuclear plants take decades and huge sums to build",
         "a single nuclear accident can make a whole region uninhabitable"]),
    "Tipping in restaurants should be replaced by higher wages.": (
        ["servers deserve a stable income instead of depending on customers' moods",
         "tips are distributed unfairly and often reflect diners' prejudices",
         "customers should see the real price of a meal on the menu"],
        ["tipping rewards servers who give excellent service",
         "higher wages would force restaurants to raise prices for everyone",
         "good servers often earn more from tips than any wage would pay them"]),
    "Professional athletes are paid too much.": (
        ["teachers and nurses do more for society yet earn a tiny fraction of athletes' pay",
         "huge salaries drive up ticket prices for ordinary fans",
         "money poured into star salaries could fund youth sport instead"],
        ["athletes' pay simply reflects the revenue they bring to their clubs",
         "most professional careers are short and physically risky",
         "only a tiny minority of athletes ever earn the famous salaries"]),
    "Remote work should be the default for office jobs.": (
        ["remote work saves employees hours of commuting every week",
         "working from home lets parents balance jobs and childcare",
         "companies can hire talented people who live far from the office"],
        ["new employees learn much faster when they sit next to experienced colleagues",
         "spontaneous conversations in the office spark new ideas",
         "working from home blurs the line between job and private life"]),
    "Genetically modified crops should be allowed everywhere.": (
        ["modified crops resist pests and need fewer pesticides",
         "drought-tolerant crops can prevent famine as the climate warms",
         "decades of studies have found modified food safe to eat"],
        ["a few corporations would control the seed supply",
         "modified genes can spread into wild plants",
         "farmers in poor countries could not afford to buy new seed every year"]),
}

#: renderings of an opinion clause into a stand-alone argument (none concessive)
EXPANSIONS = (
    "I think {c}.",
    "The way I see it, {c}, and that should settle the question.",
    "{C}. That is the main point for me.",
    "Honestly, {c}, and too few people talk about it.",
    "From what I have seen, {c}.",
    "{C}, and the evidence for this keeps piling up.",
    "My view is simple: {c}.",
)

FRAMINGS = ("plain", "concessive", "rebuttal")
PLAIN = ("This question comes up again and again where I live.",
         "I have followed this debate for a long time now.",
         "Let me say what I think about this topic.",
         "Everyone around me seems to have an opinion on this.")
CONCESSIVE = ("Although {o}, {w}.",
              "It is true that {o}. Still, {w}.",
              "Admittedly, {o}. Even so, {w}.",
              "I get that {o}, yet {w}.")
REBUTTAL = ("Some claim that {o}. That claim does not hold up. {W}.",
            "People say {o}, which is simply wrong. {W}.",
            "It is often said that {o}. I disagree. {W}.",
            "You hear that {o}. Nonsense. {W}.")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def records(seed: int, n_expanded: int = 5) -> list[dict]:
    """The mini benchmark as release-schema records: ``n_expanded`` renderings per opinion, drawn
    (without replacement) from :data:`EXPANSIONS` by ``seed``."""
    n_expanded = _positive_int(n_expanded, "n_expanded")
    if n_expanded > len(EXPANSIONS):
        raise ValueError(f"n_expanded must be at most {len(EXPANSIONS)}, got {n_expanded}")
    rng = _rng(seed)
    out = []
    for topic, (pros, cons) in TOPICS.items():
        rec = {"topic": topic, "pros": [], "cons": []}
        for side, clauses in (("pros", pros), ("cons", cons)):
            for c in clauses:
                tpl = rng.choice(len(EXPANSIONS), size=n_expanded, replace=False)
                rec[side].append({"opinion": _cap(c) + ".", "top5_matches": [],
                                  "expanded": [EXPANSIONS[i].format(c=c, C=_cap(c)) for i in tpl]})
        out.append(rec)
    return out


def topics(seed: int, n_expanded: int = 5):
    """:func:`records` parsed into :class:`~.dataset.Topic` objects."""
    return parse(records(seed, n_expanded))


def polarity_pairs(n: int, seed: int, framings=FRAMINGS) -> list[list[dict]]:
    """``n`` groups of polarity items; group ``i`` holds one item per framing (same topic, same own
    opinion, same opposing opinion, same answer). Items carry ``framing`` and ``concessive``."""
    n = _positive_int(n, "n")
    bad = [f for f in framings if f not in FRAMINGS]
    if bad or not framings:
        raise ValueError(f"framings must be a non-empty subset of {FRAMINGS}, got {list(framings)}")
    rng = _rng(seed)
    names = list(TOPICS)
    groups = []
    for _ in range(n):
        topic = names[rng.integers(len(names))]
        pros, cons = TOPICS[topic]
        stance = ("pro", "con")[int(rng.integers(2))]
        own_side, other = (pros, cons) if stance == "pro" else (cons, pros)
        w, o = own_side[rng.integers(3)], other[rng.integers(3)]
        pick = [int(rng.integers(4)) for _ in range(3)]
        text = {"plain": f"{PLAIN[pick[0]]} {_cap(w)}.",
                "concessive": CONCESSIVE[pick[1]].format(o=o, w=w),
                "rebuttal": REBUTTAL[pick[2]].format(o=o, W=_cap(w))}
        groups.append([dict(task="polarity", topic=topic, argument=text[f], answer=stance, framing=f,
                            concessive=f == "concessive") for f in framings])
    return groups
