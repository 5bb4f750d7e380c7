"""Writes extraction_long_context.jsonl: 32 retrieval/extraction prompts over long contexts
(logs, tables, directories, notes, terms) written for this project. The answers copy spans of
the context, the regime where prompt-lookup (ngram) drafting accepts the most.

Deterministic: python workloads/data/make_extraction.py rewrites the same file."""

import json
import random
from pathlib import Path

rng = random.Random(20261129)
SERVICES = ["auth", "billing", "search", "checkout", "inventory", "mailer", "gateway", "reports"]
MESSAGES = {
    "INFO": ["request completed in {n} ms", "cache warmed with {n} entries", "health check passed",
             "user session refreshed", "scheduled job started", "config reloaded from disk"],
    "WARN": ["slow query took {n} ms", "retrying upstream call (attempt {k} of 3)", "queue depth at {n} "
                                                                                    "messages",
             "certificate expires in {k} days"],
    "ERROR": ["connection refused by db-{k}.internal:5432", "payment provider returned HTTP 502",
              "timeout after {n} ms waiting for lock orders_{k}", "failed to parse message id {n}: "
                                                                  "unexpected end of input"],
}
FIRST = ["Amara", "Bruno", "Chen", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ilse", "Jonas", "Keiko", "Luis",
         "Mira", "Nikhil", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tariq", "Ulla", "Viktor", "Wen", "Yara"]
LAST = ["Okafor", "Lindgren", "Moreau", "Haddad", "Novak", "Tanaka", "Alvarez", "Brandt", "Costa", "Dubois",
        "Eriksen", "Fischer", "Gupta", "Ivanova", "Jensen", "Kowalski"]
TEAMS = ["Platform", "Payments", "Data", "Support", "Design", "Security", "Mobile", "Research"]
PRODUCTS = ["ceramic mug", "steel water bottle", "linen napkin set", "oak cutting board", "wool blanket",
            "glass teapot", "cast iron pan", "bamboo utensil set", "copper kettle", "stoneware bowl",
            "cotton apron", "walnut serving tray", "enamel colander", "porcelain plate set"]


def log_context(i: int) -> tuple[str, str]:
    lines = []
    for minute in range(28):
        level = rng.choices(["INFO", "WARN", "ERROR"], weights=[7, 2, 1])[0]
        message = rng.choice(MESSAGES[level]).format(n=rng.randint(10, 9999), k=rng.randint(1, 9))
        lines.append(f"2026-03-{10 + i % 15:02d}T14:{minute * 2:02d}:{rng.randint(0, 59):02d}Z {level:<5} "
                     f"[{rng.choice(SERVICES)}] {message}")
    question = rng.choice([
        "Copy every line with level ERROR, exactly as it appears, one per line.",
        "List every WARN line exactly as written, in order.",
        "Which service logged the most lines? Quote all of that service's lines verbatim.",
    ])
    return "Here is an excerpt of an application log:\n\n" + "\n".join(lines), question


def table_context(i: int) -> tuple[str, str]:
    rows = ["| sku | product | warehouse | stock | unit price (EUR) |", "|---|---|---|---|---|"]
    for _ in range(22):
        rows.append(f"| KT-{rng.randint(1000, 9999)} | {rng.choice(PRODUCTS)} | "
                    f"{rng.choice(['Lyon', 'Gdansk', 'Porto', 'Leipzig'])} "
                    f"| {rng.randint(0, 60)} | {rng.randint(4, 120)}.{rng.choice(['00', '50', '90', '95'])} |")
    question = rng.choice([
        "Copy the full table rows (with all columns) for every item with a stock below 10.",
        "Reproduce the rows for the Porto warehouse exactly, keeping the table format.",
        "List the sku and product name of every row whose unit price is above 80 euros, exactly as written "
        "in the table.",
    ])
    return "Inventory snapshot:\n\n" + "\n".join(rows), question


def directory_context(i: int) -> tuple[str, str]:
    people = []
    for _ in range(16):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        people.append((first, last, rng.choice(TEAMS), f"{first.lower()}.{last.lower()}@northwind-labs.example",
                       f"+44 20 7946 {rng.randint(1000, 9999)}", f"Building {rng.choice('ABCD')}, room "
                                                                 f"{rng.randint(100, 499)}"))
    target = rng.choice(people)
    entries = [f"Name: {f} {l}\nTeam: {t}\nEmail: {e}\nPhone: {p}\nOffice: {o}" for f, l, t, e, p, o in people]
    question = rng.choice([
        f"What are the email address, phone number and office of {target[0]} {target[1]}? Copy them exactly.",
        f"Copy the complete directory entries of everyone in the {target[2]} team.",
    ])
    return "Staff directory:\n\n" + "\n\n".join(entries), question


def notes_context(i: int) -> tuple[str, str]:
    speakers = rng.sample(FIRST, 4)
    topics = ["the release date", "the budget for the pilot", "hiring for the support team", "the office move",
              "the customer survey results", "the security audit", "the new pricing page"]
    turns, spoke = [], []
    for _ in range(14):
        speaker, topic = rng.choice(speakers), rng.choice(topics)
        stance = rng.choice(["I think we should postpone", "I am in favour of moving ahead with",
                             "We need more data before deciding on", "Let me summarise where we are with",
                             "My concern is the timeline for", "I spoke to the vendor yesterday about"])
        detail = rng.choice(["and I can share the numbers by Friday.", "because two clients asked about it "
                                                                       "this week.",
                             "if legal signs off on the contract.", "since the last estimate was too "
                                                                    "optimistic.",
                             "and the team agreed to revisit it in March.", "so let's put it on next week's "
                                                                            "agenda."])
        turns.append(f"{speaker}: {stance} {topic}, {detail}")
        spoke.append(speaker)
    who = rng.choice(sorted(set(spoke)))
    question = rng.choice([
        f"Quote, word for word, everything {who} said in this meeting.",
        "Copy every sentence that mentions the budget for the pilot, exactly as spoken, with the speaker's "
        "name.",
    ])
    return "Transcript of the weekly planning meeting:\n\n" + "\n".join(turns), question


def terms_context(i: int) -> tuple[str, str]:
    clauses = [
        "The subscription renews automatically at the end of each billing period unless cancelled at least "
        "{d} days before the renewal date.",
        "Refunds are available within {d} days of purchase for annual plans; monthly plans are not "
        "refundable.",
        "The customer may export their data at any time in CSV or JSON format at no additional cost.",
        "The provider will notify the customer of planned maintenance at least {d} hours in advance by email.",
        "Service availability is guaranteed at {p} percent per calendar month, excluding planned maintenance.",
        "If availability falls below the guarantee, the customer receives a credit of {p} percent of the "
        "monthly fee.",
        "Either party may terminate the agreement with {d} days' written notice.",
        "The provider does not sell customer data to third parties and processes it only to deliver the "
        "service.",
        "Disputes are governed by the laws of the Netherlands and heard by the courts of Amsterdam.",
        "Prices may change once per year with at least {d} days' notice before the change takes effect.",
    ]
    chosen = rng.sample(clauses, 8)
    text = "\n".join(f"{n}. " + c.format(d=rng.choice([7, 14, 30, 60]), p=rng.choice([5, 10, 99.5, 99.9]))
                     for n, c in enumerate(chosen, 1))
    k = rng.randint(1, 8)
    question = rng.choice([f"Repeat clause {k} verbatim.", "Copy every clause that mentions a number of "
                                                           "days, exactly as written."])
    return "Terms of service (excerpt):\n\n" + text, question


KINDS = [log_context, table_context, directory_context, notes_context, terms_context]
rows = []
for i in range(32):
    context, question = KINDS[i % len(KINDS)](i)
    rows.append({"id": f"extract-{i + 1:02d}", "prompt": f"{context}\n\n{question}"})
out = Path(__file__).with_name("extraction_long_context.jsonl")
out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
print(f"wrote {len(rows)} prompts to {out}")
