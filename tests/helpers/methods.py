"""A context the methods run on with scripted replies, and a listener of the stages they report."""

import json

from ragfunnel.types import on_stage

# Ten-word paragraphs; chunk_words=10 makes each one a chunk.
PARAGRAPHS = [
    "The lighthouse on Gull Rock was built from granite, 1871.",
    "Its first keeper, Martha Quill, tended the lamp thirty years.",
    "A storm in 1902 cracked the lantern glass badly overnight.",
    "The island ferry runs twice daily from Port Ellis harbour.",
    "Quill's diaries describe the seabird colonies and fierce winter gales.",
    "In 1950 the light was automated; the cottage was sold.",
]
CONTEXT = "\n\n".join(PARAGRAPHS)


def scripted(answer="Martha Quill", draft="Rationale: the keeper Martha Quill kept the lamp. Answer: Martha Quill"):
    def reply(prompt, i):
        return draft if prompt.rstrip().endswith("Rationale:") else answer
    return reply


class Listener:
    """Snapshots of every stage as it was reported (later edits to the object would not show here)."""

    def __init__(self):
        self.done: list[str] = []
        self.started: list[str] = []

    def on_done(self, stage):
        self.done.append(json.dumps(stage.to_dict(), sort_keys=True, default=str))

    def final(self, prediction) -> list[str]:
        return [json.dumps(s.to_dict(), sort_keys=True, default=str) for s in prediction.trace.stages]


def streamed(run):
    listener = Listener()
    with on_stage(listener.on_done, started=listener.started.append):
        prediction = run()
    return listener, prediction
