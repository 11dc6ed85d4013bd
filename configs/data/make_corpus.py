#!/usr/bin/env python3
"""make_corpus.py: writes configs/data/corpus.txt, the small shipped pretraining corpus of the
demo job: templated English sentences about the same world as the tool-calling data, plus plain-
text transcripts of tool calls (other samples than configs/data/tools.jsonl, from another seed),
so the base model knows the words and JSON bytes the fine-tune needs and the fine-tune teaches
the chat format. Deterministic (fixed seeds); run from the repository root; the output is
committed. loom never runs Python: this script only documents where the text came from."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tools  # noqa: E402  (the tool-call generator, for the transcripts)

rng = random.Random(1337)
cities = ["Paris", "Berlin", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Seoul", "Quito", "Perth",
          "Dublin", "Madrid", "Nairobi", "Hanoi", "Denver", "Austin", "Kyoto", "Porto"]
skies = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "clear", "stormy"]
rooms = ["kitchen", "bedroom", "living room", "office", "garage", "hallway", "bathroom"]
names = ["Ada", "Alan", "Grace", "Linus", "Ken", "Barbara", "Edsger", "Margaret", "Dennis", "Frances"]
things = ["the report", "the slides", "a cake", "the garden", "the bike", "the tickets", "dinner"]

def sentence():
    k = rng.randrange(8)
    c, s, r, n, t = rng.choice(cities), rng.choice(skies), rng.choice(rooms), rng.choice(names), rng.choice(things)
    if k == 0:
        return f"The weather in {c} is {s} today, with a high of {rng.randint(-5, 35)} degrees."
    if k == 1:
        return f"Turn the {r} lights {rng.choice(['on', 'off'])} and set them to {rng.randrange(10, 101, 10)} percent."
    if k == 2:
        return f"Set a timer for {rng.randint(1, 59)} minutes so {n} remembers {t}."
    if k == 3:
        return f"Send a message to {n}: I will bring {t} to {c} on {rng.choice(['Monday', 'Friday', 'Sunday'])}."
    if k == 4:
        return f"{n} asked whether it will be {s} in {c} tomorrow morning."
    if k == 5:
        return f"At {rng.randint(1, 12)} o'clock the {r} gets warm, so {n} opens the window."
    if k == 6:
        return f"Remind {n} to finish {t} before the trip to {c}."
    return f"In {c} the sky was {s}, and {n} stayed in the {r} with {t}."

def transcript(r):
    rec = make_tools.example(r)
    return (f"user: {rec['query']}\ntools: {make_tools.compact(rec['tools'])}\n"
            f"assistant: {make_tools.compact(rec['answers'])}")

lines = []
tool_rng = random.Random(7)  # not make_tools.SEED: these are not the fine-tuning examples
while sum(len(l) + 1 for l in lines) < 600_000:
    if rng.random() < 0.5:
        lines.append(transcript(tool_rng))
    else:
        lines.append(" ".join(sentence() for _ in range(rng.randint(2, 5))))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
