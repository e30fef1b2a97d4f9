"""Worked examples for a small reader of a self-ask chain over one long context (``stepwise``).

Written here, about invented people and places, so no benchmark's question is among them. Each shows one move
a small model gets wrong without it: a bridge question answered at its last hop, not its first; a comparison
read one option per follow-up, then decided; a question one passage answers outright, answered at once. Every
final answer is a short phrase, as the chain's answers are scored.
"""

from __future__ import annotations

from ragfunnel.prompts.self_ask import FollowUp, Shot
from ragfunnel.types import Document

READER_SHOTS: tuple[Shot, ...] = (
    Shot(
        question="In which town was the winner of the 1987 Orla Cup born?",
        answer="Zwolle",
        documents=(
            Document("s1a", "", "The Orla Cup of 1987 went to the cyclist Tomas Verhoef, who won the last stage "
                                "in heavy rain."),
            Document("s1b", "", "Tomas Verhoef was born in Zwolle in 1962 and later kept a bicycle shop in "
                                "Utrecht."),
        ),
        follow_ups=(FollowUp("Who won the 1987 Orla Cup?", "Tomas Verhoef"),
                    FollowUp("In which town was Tomas Verhoef born?", "Zwolle")),
    ),
    Shot(
        question="Who was born first, Ilse Brand or Marta Sobel?",
        answer="Marta Sobel",
        documents=(
            Document("s2a", "", "The painter Ilse Brand was born in Kiel on 3 May 1921."),
            Document("s2b", "", "Marta Sobel, a sculptor, was born in Krakow on 12 January 1919."),
        ),
        follow_ups=(FollowUp("When was Ilse Brand born?", "3 May 1921"),
                    FollowUp("When was Marta Sobel born?", "12 January 1919")),
    ),
    Shot(
        question="When was the Keld footbridge rebuilt?",
        answer="1998",
        documents=(Document("s3a", "", "The Keld footbridge over the river Swale was rebuilt in 1998 after a "
                                       "flood."),),
    ),
)
