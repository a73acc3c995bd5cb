"""Where a screenshot the docs show is written: var/test-artifacts/ on every run, so a test run
leaves the checkout as it found it; docs/images/ only when a person refreshing the docs' images
asks for it with LOOP_DOC_IMAGES=1."""

import os
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
ARTIFACTS = PROJECT_DIR / "var" / "test-artifacts"
DOC_IMAGES = PROJECT_DIR / "docs" / "images"


def doc_image(name: str) -> Path:
    """The path to save the docs' image `name` to, its folder made."""
    folder = DOC_IMAGES if os.environ.get("LOOP_DOC_IMAGES") == "1" else ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
