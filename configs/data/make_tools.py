#!/usr/bin/env python3
"""make_tools.py: writes configs/data/tools.jsonl, the small shipped tool-calling data set of the
fine-tuning demo (format in docs/finetune-data.md). Deterministic (fixed seed); run once, the
output is committed. loom never runs Python: this script only documents where the data came from.

Each example offers 2-4 tools (the right one always among them, shuffled), a short templated
query, and the expected calls; about 10% are off-topic (no call), some carry a short reasoning,
a few ask for two things at once. Tool schemas use a terse dialect ("arg": "type", a trailing
"?" marks an optional argument) so that a byte-level model sees short examples: loom renders
`parameters` verbatim and does not interpret it."""
import json
import random
import sys

SEED = 20240611
N_EXAMPLES = 600
OUT = "configs/data/tools.jsonl"

TOOLS = {
    "set_lights": {"room": "str", "state": "on|off", "brightness": "int?"},
    "get_weather": {"city": "str", "day": "today|tomorrow"},
    "set_timer": {"minutes": "int", "label": "str?"},
    "send_message": {"to": "str", "text": "str"},
    "play_music": {"artist": "str?"},
    "set_thermostat": {"temp": "int", "room": "str?"},
    "add_todo": {"item": "str"},
}

ROOMS = ["kitchen", "bedroom", "living room", "office", "bathroom", "hallway", "garage"]
CITIES = ["Paris", "Berlin", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Seoul", "Dublin",
          "Madrid", "Denver", "Kyoto", "Porto", "Nairobi"]
LABELS = ["pasta", "tea", "laundry", "eggs", "oven", "break", "pizza", "rice"]
PEOPLE = ["Anna", "Ben", "Mom", "Dad", "Sam", "Lisa", "Omar", "Priya", "Kenji", "Maria"]
TEXTS = ["I'm running late", "see you at six", "call me back", "dinner is ready",
         "happy birthday", "on my way", "the meeting moved to 3", "bring the keys"]
ARTISTS = ["Queen", "Adele", "Miles Davis", "Daft Punk", "Bach", "Nina Simone", "ABBA",
           "Radiohead", "Bob Marley"]
ITEMS = ["buy milk", "call the bank", "pay rent", "water the plants", "book a dentist visit",
         "return the library books", "renew my passport", "fix the bike"]


def lights(r):
    room, state = r.choice(ROOMS), r.choice(["on", "off"])
    if r.random() < 0.3:
        b = r.choice([10, 20, 25, 30, 40, 50, 60, 70, 75, 80, 90, 100])
        q = r.choice(["dim the {room} lights to {b}%", "set the {room} lights to {b} percent",
                      "{room} lights at {b}%"]).format(room=room, b=b)
        return q, {"room": room, "state": "on", "brightness": b}, f"{room} lights on at {b}%."
    q = r.choice(["turn {s} the {room} lights", "switch the lights {s} in the {room}",
                  "{room} lights {s}", "lights {s} in the {room}",
                  "can you turn the {room} light {s}", "please switch {s} the {room} lights"])
    return q.format(s=state, room=room), {"room": room, "state": state}, f"{room} lights {state}."


def weather(r):
    city, day = r.choice(CITIES), r.choice(["today", "tomorrow"])
    q = r.choice(["what's the weather in {c} {d}", "will it rain in {c} {d}",
                  "how warm is it in {c} {d}", "{c} forecast for {d}",
                  "do I need an umbrella in {c} {d}", "weather {d} in {c}"])
    return q.format(c=city, d=day), {"city": city, "day": day}, f"Weather for {city}, {day}."


def timer(r):
    m = r.choice([1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 45, 60, 90])
    if r.random() < 0.5:
        label = r.choice(LABELS)
        q = r.choice(["set a {l} timer for {m} minutes", "timer {m} min for the {l}",
                      "start a {m} minute timer for {l}", "{m} minutes for the {l} please"])
        return q.format(l=label, m=m), {"minutes": m, "label": label}, f"A {m} minute {label} timer."
    q = r.choice(["set a timer for {m} minutes", "{m} minute timer", "start a timer, {m} min",
                  "time {m} minutes for me"])
    return q.format(m=m), {"minutes": m}, f"A {m} minute timer."


def message(r):
    to, text = r.choice(PEOPLE), r.choice(TEXTS)
    q = r.choice(["text {to} saying {t}", "send a message to {to}: {t}", "tell {to} {t}",
                  "message {to}: {t}", "let {to} know: {t}"])
    return q.format(to=to, t=text), {"to": to, "text": text}, f"A message to {to}."


def music(r):
    if r.random() < 0.3:
        q = r.choice(["play some music", "play something", "music please", "put some music on"])
        return q, {}, "Any music."
    a = r.choice(ARTISTS)
    q = r.choice(["play {a}", "put on some {a}", "I want to hear {a}", "play songs by {a}"])
    return q.format(a=a), {"artist": a}, f"Music by {a}."


def thermostat(r):
    t = r.randint(16, 26)
    if r.random() < 0.4:
        room = r.choice(ROOMS)
        q = r.choice(["make the {room} {t} degrees", "warm the {room} up to {t}",
                      "set the {room} to {t} degrees"])
        return q.format(room=room, t=t), {"temp": t, "room": room}, f"{room} to {t} degrees."
    q = r.choice(["set the heating to {t} degrees", "thermostat to {t}", "I want it {t} degrees",
                  "heat the house to {t}"])
    return q.format(t=t), {"temp": t}, f"Heating to {t} degrees."


def todo(r):
    item = r.choice(ITEMS)
    q = r.choice(["add {i} to my to-do list", "remind me to {i}", "add to my list: {i}",
                  "todo: {i}", "note that I must {i}"])
    return q.format(i=item), {"item": item}, f"A to-do: {item}."


INTENTS = {"set_lights": lights, "get_weather": weather, "set_timer": timer,
           "send_message": message, "play_music": music, "set_thermostat": thermostat,
           "add_todo": todo}


def off_topic(r):
    a, b = r.randint(2, 12), r.randint(2, 12)
    return r.choice([
        f"what is {a} times {b}",
        "tell me a joke about " + r.choice(["cats", "robots", "cheese", "trains", "ghosts"]),
        "who wrote " + r.choice(["Hamlet", "Dracula", "Emma", "Ulysses", "Beloved"]),
        "what's the capital of " + r.choice(["France", "Peru", "Japan", "Kenya", "Norway", "Chile"]),
        "translate " + r.choice(["hello", "thanks", "cheese", "goodbye"]) + " to "
        + r.choice(["Spanish", "German", "Korean", "Italian"]),
        "how do you spell " + r.choice(["necessary", "rhythm", "queue", "giraffe"]),
        "how many legs does a " + r.choice(["spider", "crab", "bee", "horse"]) + " have",
        r.choice(["how are you today", "thanks a lot", "good morning", "who are you",
                  "what can you do", "are you a robot", "I'm bored"]),
    ])


def style(r, q):
    """Surface variety: capital first letter, an ending, the odd 'please'."""
    if r.random() < 0.15 and "please" not in q:
        q = "please " + q
    if r.random() < 0.5:
        q = q[0].upper() + q[1:]
    return q + r.choice(["", "", ".", "?" if q.split()[0].lower() in
                         ("what's", "will", "how", "do", "can", "who", "what", "are") else "!"])


def tool_set(r, needed):
    """2 tools (the needed ones included, shuffled): short enough for a 256-token window."""
    k = max(len(needed), 2)
    others = [t for t in TOOLS if t not in needed]
    names = list(needed) + r.sample(others, k - len(needed))
    r.shuffle(names)
    return [{"name": n, "parameters": TOOLS[n]} for n in names]


def example(r):
    """One example: (record dict)."""
    u = r.random()
    reason = None
    if u < 0.07:  # off-topic, no call
        q, tools, answers, reason = style(r, off_topic(r)), tool_set(r, []), [], "No tool fits this."
    elif u < 0.10:  # a tool request whose tool is not offered
        want = r.choice(list(TOOLS))
        q, _, _ = INTENTS[want](r)
        q = style(r, q)
        names = r.sample([t for t in TOOLS if t != want], 2)
        tools = [{"name": n, "parameters": TOOLS[n]} for n in names]
        answers, reason = [], "No offered tool can do that."
    elif u < 0.15:  # two requests at once
        t1, t2 = r.sample(list(TOOLS), 2)
        q1, a1, _ = INTENTS[t1](r)
        q2, a2, _ = INTENTS[t2](r)
        q = style(r, q1 + " and " + q2)
        tools = tool_set(r, [t1, t2])
        answers = [{"name": t1, "arguments": a1}, {"name": t2, "arguments": a2}]
        reason = f"Two requests: {t1}, then {t2}."
    else:
        want = r.choice(list(TOOLS))
        q, args, reason = INTENTS[want](r)
        q = style(r, q)
        tools = tool_set(r, [want])
        answers = [{"name": want, "arguments": args}]
    rec = {"query": q, "tools": tools, "answers": answers}
    if reason and r.random() < 0.25:
        rec["reasoning"] = reason
    return rec


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def rendered_len(rec):
    """Tokens of loom's rendering (core/text/chat.h): bytes + one token per marker."""
    n = 2 + len(compact(rec["tools"]).encode()) + 1 + len(rec["query"].encode()) + 2
    if "reasoning" in rec:
        n += 1 + len(rec["reasoning"].encode())
    return n + 1 + len(compact(rec["answers"]).encode()) + 1


MAX_TOKENS = 256  # rendered length cap, so every example fits one 256-token row


def main():
    r = random.Random(SEED)
    seen, out = set(), []
    while len(out) < N_EXAMPLES:
        rec = example(r)
        if len(rec["tools"]) < 2 or rendered_len(rec) > MAX_TOKENS:
            continue  # the demo trains at a 256-token window: longer examples are left out
        key = (rec["query"].lower().rstrip(".?!"), frozenset(t["name"] for t in rec["tools"]))
        if key in seen:
            continue
        seen.add(key)
        out.append(rec)
    lens = sorted(rendered_len(x) for x in out)
    assert lens[-1] <= MAX_TOKENS, lens[-1]
    with open(OUT, "w", encoding="utf-8") as f:
        for rec in out:
            f.write(compact(rec) + "\n")
    no_call = sum(1 for x in out if not x["answers"])
    print(f"{OUT}: {len(out)} examples, {no_call} without a call, "
          f"{sum(1 for x in out if 'reasoning' in x)} with reasoning, "
          f"{sum(1 for x in out if len(x['answers']) > 1)} with two calls; rendered tokens: "
          f"median {lens[len(lens) // 2]}, max {lens[-1]}, "
          f"<= 256: {sum(1 for n in lens if n <= 256)}", file=sys.stderr)


if __name__ == "__main__":
    main()
