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

The default embedder (memory.embedders.HashedNgramEmbedder) always runs; the neural one
(memory.neural.MiniLMEmbedder) runs when it and its optional requirements are installed.
Everything is deterministic.
"""

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.utils.module_loading import import_string  # noqa: E402

from memory.embedders import Embedder, HashedNgramEmbedder, Vector  # noqa: E402

NEURAL = "memory.neural.MiniLMEmbedder"


def run(task: str, answer: str, outcome: str = "succeeded") -> str:
    """A memory as Loop stores it after a run."""
    return f"Task: {task}\nOutcome: {outcome}\nAnswer: {answer}"


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
)

STORE: tuple[str, ...] = tuple(memory for memory, _ in PAIRS) + DISTRACTORS


def available_embedders() -> tuple[list[Embedder], list[str]]:
    """The default embedder, and the neural one when it can be built; why not, otherwise."""
    found: list[Embedder] = [HashedNgramEmbedder()]
    skipped: list[str] = []
    try:
        found.append(import_string(NEURAL)())
    except (ImportError, ImproperlyConfigured) as error:
        skipped.append(f"{NEURAL} skipped: {error}")
    return found, skipped


def dot(first: Vector, second: Vector) -> float:
    return sum(a * b for a, b in zip(first, second, strict=True))


def ranking(query: Vector, store: Sequence[Vector]) -> list[tuple[float, int]]:
    """(similarity, store index), best first; ties go to the lower index."""
    return sorted(
        ((dot(query, memory), index) for index, memory in enumerate(store)),
        key=lambda pair: (-pair[0], pair[1]),
    )


def decile(values: Sequence[float], which: int) -> float:
    """The which*10th percentile, interpolated between the sorted values."""
    return statistics.quantiles(values, n=10, method="inclusive")[which - 1]


def first_line(text: str, width: int = 70) -> str:
    line = text.replace("\n", " | ")
    return line if len(line) <= width else line[: width - 1] + "…"


class Measured:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        store = embedder.embed(STORE)
        queries = embedder.embed([query for _, query in PAIRS])
        unrelated = embedder.embed(UNRELATED)
        self.rankings = [ranking(query, store) for query in queries]
        self.unrelated_best = [ranking(query, store)[0][0] for query in unrelated]

    def rank_of_target(self, target: int) -> int:
        return next(n for n, (_, index) in enumerate(self.rankings[target]) if index == target)

    def target_similarity(self, target: int) -> float:
        return next(score for score, index in self.rankings[target] if index == target)

    def best_other(self, target: int) -> tuple[float, int]:
        return next((score, index) for score, index in self.rankings[target] if index != target)

    def hits(self, within: int) -> int:
        return sum(self.rank_of_target(target) < within for target in range(len(PAIRS)))

    def margin(self) -> float:
        return statistics.fmean(
            self.target_similarity(target) - self.best_other(target)[0]
            for target in range(len(PAIRS))
        )


def percent(count: int) -> str:
    return f"{count}/{len(PAIRS)} ({count / len(PAIRS):.0%})"


def print_table(results: list[Measured]) -> None:
    print(
        f"{'embedder':<20}{'dims':>6}{'pairs':>7}{'store':>7}"
        f"{'hit@1':>16}{'hit@3':>16}{'margin':>9}"
    )
    for result in results:
        print(
            f"{result.embedder.name:<20}{result.embedder.dimensions:>6}{len(PAIRS):>7}"
            f"{len(STORE):>7}{percent(result.hits(1)):>16}{percent(result.hits(3)):>16}"
            f"{result.margin():>+9.3f}"
        )


def print_floor(result: Measured) -> None:
    targets = [result.target_similarity(target) for target in range(len(PAIRS))]
    related = decile(targets, 1)
    unrelated = decile(result.unrelated_best, 9)
    print(f"\nrelevance floor for {result.embedder.name}:")
    print(
        f"  query-to-target similarity, 10th percentile ({len(targets)} queries):   {related:.3f}"
    )
    print(
        f"  unrelated query's best similarity, 90th percentile ({len(UNRELATED)} queries): "
        f"{unrelated:.3f}"
    )
    if related > unrelated:
        floor = (related + unrelated) / 2
        kept = sum(score >= floor for score in targets)
        dropped = sum(score < floor for score in result.unrelated_best)
        print(
            f"  they separate: suggested floor {floor:.3f} "
            f"(keeps {kept}/{len(targets)} targets, drops {dropped}/{len(UNRELATED)} unrelated)"
        )
    else:
        print(
            "  they overlap: no floor keeps 90% of targets and drops 90% of unrelated queries "
            f"(targets range {min(targets):.3f}..{max(targets):.3f}, unrelated best "
            f"{min(result.unrelated_best):.3f}..{max(result.unrelated_best):.3f})"
        )


def print_misses(result: Measured) -> None:
    misses = [target for target in range(len(PAIRS)) if result.rank_of_target(target) > 0]
    print(f"\nmisses for {result.embedder.name} ({len(misses)}): target rank, query, then")
    print("  target (similarity) and what ranked first (similarity)")
    for target in misses:
        score, first = result.rankings[target][0]
        print(f"  #{result.rank_of_target(target) + 1:<3} {PAIRS[target][1]}")
        print(f"       target {result.target_similarity(target):.3f}  {first_line(STORE[target])}")
        print(f"       first  {score:.3f}  {first_line(STORE[first])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show-misses",
        action="store_true",
        help="list the queries whose target was not ranked first, with what was",
    )
    show_misses = parser.parse_args().show_misses

    embedders, skipped = available_embedders()
    for reason in skipped:
        print(reason)
    results = [Measured(embedder) for embedder in embedders]
    print_table(results)
    print(
        "margin: mean of (target similarity - best other memory's similarity) per query; "
        "hit@k: target ranked within the top k of the whole store"
    )
    for result in results:
        print_floor(result)
    if show_misses:
        for result in results:
            print_misses(result)


if __name__ == "__main__":
    main()
