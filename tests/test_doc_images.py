"""A test run never rewrites the tracked images under docs/images/: the screenshots the docs show
go to var/test-artifacts/ unless LOOP_DOC_IMAGES=1 asks for the docs' copies, and no test module
writes into docs/images/ another way."""

import re

import pytest

from tests.doc_images import ARTIFACTS, DOC_IMAGES, PROJECT_DIR, doc_image

pytestmark = pytest.mark.fast

# A path into docs/images/ built in code, as a screenshot's target would be.
INTO_DOCS_IMAGES = re.compile(r"""["']docs["']\s*/\s*["']images["']|["']docs/images/?["']""")


def test_a_docs_image_goes_to_the_artifacts_on_an_ordinary_run(monkeypatch):
    monkeypatch.delenv("LOOP_DOC_IMAGES", raising=False)
    assert doc_image("sidebar-menu.png") == ARTIFACTS / "sidebar-menu.png"


def test_a_docs_image_goes_to_the_docs_only_when_asked(monkeypatch):
    monkeypatch.setenv("LOOP_DOC_IMAGES", "0")
    assert doc_image("sidebar-menu.png") == ARTIFACTS / "sidebar-menu.png"
    monkeypatch.setenv("LOOP_DOC_IMAGES", "1")
    assert doc_image("sidebar-menu.png") == DOC_IMAGES / "sidebar-menu.png"


def test_no_test_module_writes_into_docs_images_but_through_doc_image():
    writers = [
        path.name
        for path in sorted((PROJECT_DIR / "tests").glob("*.py"))
        if path.name != "doc_images.py" and INTO_DOCS_IMAGES.search(path.read_text())
    ]
    assert writers == []
