"""Answers and previews in a real browser (Debian's Chromium through Playwright), against a live
daphne and a real worker, under the site's CSP: an answer's table and highlighted code, copied to
the clipboard; files attached in the composer by its button, by a drop and by a paste, and named
in the task; each kind of preview. Screenshots land in var/test-artifacts/
(docs/images/chat-answer-rendered.png and files-preview.png are copies of two, made by hand like
the chat's)."""

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Locator, Page, expect

from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
    send,
)
from tests.test_files_previews import png
from tests.test_web_browser_csp import REPORT_VIOLATIONS
from tools.context import context_for

pytestmark = pytest.mark.django_db(transaction=True)

CODE = 'def area(width, height):\n    return width * height  # "<b>" stays text\n'
REPORT = f"""Sizes
kept on their own lines

| room | width | height | area |
|---|--:|--:|--:|
| kitchen | 3 | 4 | 12 |
| study | 2.5 | 3 | 7.5 |

```python
{CODE}```
"""
DATA_CSV = b"name,count\nalpha,1\nbeta,2\ngamma,3 and more words\n"


def person(browser: Browser, site: str, violations: list[str]) -> Page:  # noqa: F811
    """Alice, logged in, in a context allowed the clipboard; any CSP violation is reported."""
    context = browser.new_context(
        viewport=LAPTOP, permissions=["clipboard-read", "clipboard-write"]
    )
    page = context.new_page()
    page.expose_function("reportViolation", lambda text: violations.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    page.goto(f"{site}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/")
    return page


def workspace_of_alice() -> Path:
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    return db(lambda: context_for(alice).workspace)


def clipboard(page: Page) -> str:
    return page.evaluate("navigator.clipboard.readText()")


def border_width(cell: Locator) -> str:
    return cell.evaluate("cell => getComputedStyle(cell).borderTopWidth")


def test_an_answer_shows_its_table_and_code_and_copies_them(live_site, browser, tmp_path):  # noqa: F811
    workspace = workspace_of_alice()
    (workspace / "report.md").write_text(REPORT)
    violations: list[str] = []
    page = person(browser, live_site, violations)
    page.evaluate("navigator.clipboard.writeText('')")

    send(page, "Read report.md")  # the mock answers with the file's text
    answer = last_turn(page).locator(".card.answer")
    expect(answer).to_contain_text("kitchen", timeout=WAIT_MS)

    # A table with borders and padding, lines kept apart, code highlighted.
    table = answer.locator(".prose table")
    expect(table.locator("th")).to_have_text(["room", "width", "height", "area"])
    assert border_width(table.locator("td").first) == "1px"
    assert table.locator("td").first.evaluate("cell => getComputedStyle(cell).paddingLeft") != "0px"
    expect(answer.locator(".prose p").first.locator("br")).to_have_count(1)
    keyword = answer.locator("pre.highlight .k").first
    expect(keyword).to_have_text("def")
    assert keyword.evaluate("span => getComputedStyle(span).fontWeight") == "700"

    last_turn(page).screenshot(path=ARTIFACTS / "chat-answer-rendered.png")
    light = keyword.evaluate("span => getComputedStyle(span).color")
    page.emulate_media(color_scheme="dark")
    assert keyword.evaluate("span => getComputedStyle(span).color") != light
    last_turn(page).screenshot(path=ARTIFACTS / "chat-answer-rendered-dark.png")
    page.emulate_media(color_scheme="light")

    # Copy the code block: its code exactly; copy the answer: its Markdown (the table's pipes,
    # the code's fence), none of the buttons.
    answer.get_by_role("button", name="Copy code").click()
    expect(answer.get_by_role("button", name="Copied")).to_be_visible()
    assert clipboard(page) == CODE.rstrip("\n")
    answer.get_by_role("button", name="Copy answer").click()
    expect(answer.locator("header").get_by_role("button", name="Copied")).to_be_visible()
    assert clipboard(page) == REPORT.rstrip("\n")

    # The read_file card previews its file in place, and leads to its page: the same renderer.
    card = last_turn(page).locator(".card.tool")
    card.get_by_text("Preview report.md").click()
    expect(card.locator(".file-preview-body th")).to_have_text(["room", "width", "height", "area"])
    expect(card.locator(".file-preview-body pre.highlight .k").first).to_have_text("def")
    last_turn(page).get_by_role("link", name="Open report.md").click()
    page.wait_for_url(f"{live_site}/files/view/report.md")
    preview = page.locator(".preview-markdown")
    expect(preview.locator("th")).to_have_text(["room", "width", "height", "area"])
    preview.get_by_role("button", name="Copy code").click()
    assert clipboard(page) == CODE.rstrip("\n")
    assert violations == []


DROP = """([selector, name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, {type: "text/plain"}));
  const target = document.querySelector(selector);
  for (const type of ["dragenter", "dragover", "drop"]) {
    const init = {dataTransfer: transfer, bubbles: true, cancelable: true};
    target.dispatchEvent(new DragEvent(type, init));
  }
}"""
PASTE = """([name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, {type: "text/plain"}));
  const box = document.getElementById("task");
  box.focus();
  const init = {clipboardData: transfer, bubbles: true, cancelable: true};
  box.dispatchEvent(new ClipboardEvent("paste", init));
}"""


def attachments(page: Page) -> Locator:
    return page.locator("#attachments .attachment span")


def test_files_attached_by_button_drop_and_paste_reach_the_workspace_and_the_task(
    live_site,  # noqa: F811
    browser,  # noqa: F811
    tmp_path,
):
    workspace = workspace_of_alice()
    violations: list[str] = []
    page = person(browser, live_site, violations)

    # The button: the file is in the workspace before the task is sent, which names it.
    chosen = tmp_path / "data.csv"
    chosen.write_bytes(DATA_CSV)
    with page.expect_file_chooser() as chooser:
        page.locator("label[for=attach-file]").click()
    chooser.value.set_files(chosen)
    expect(attachments(page)).to_have_text(["data.csv"], timeout=WAIT_MS)
    assert (workspace / "data.csv").read_bytes() == DATA_CSV
    page.fill("#task", "How many lines are in data.csv?")
    page.press("#task", "Enter")
    page.wait_for_url(re.compile(r"/c/\d+/$"))
    turn = last_turn(page)
    expect(turn.locator(".you .task")).to_contain_text("Attached: data.csv")
    expect(turn.locator(".card.answer")).to_contain_text("data.csv has 4 lines", timeout=WAIT_MS)
    expect(attachments(page)).to_have_count(0)

    # A drop on the conversation; the same name again keeps both, and the task names the copy.
    page.evaluate(DROP, [".timeline", "notes.txt", "buy milk\n"])
    expect(attachments(page)).to_have_text(["notes.txt"], timeout=WAIT_MS)
    page.evaluate(DROP, ["#task", "data.csv", "other,data\n"])
    expect(attachments(page)).to_have_text(["notes.txt", "data (2).csv"], timeout=WAIT_MS)
    assert (workspace / "data (2).csv").read_text() == "other,data\n"
    assert (workspace / "data.csv").read_bytes() == DATA_CSV

    # A paste into the task; a file taken off the list stays in the workspace.
    page.evaluate(PASTE, ["pasted.txt", "from the clipboard\n"])
    expect(attachments(page)).to_have_text(["notes.txt", "data (2).csv", "pasted.txt"])
    page.locator("#task-form").screenshot(path=ARTIFACTS / "composer-attachments.png")
    page.get_by_role("button", name=re.compile(r"Do not name data \(2\)\.csv")).click()
    expect(attachments(page)).to_have_text(["notes.txt", "pasted.txt"])
    assert (workspace / "pasted.txt").read_text() == "from the clipboard\n"
    assert (workspace / "data (2).csv").exists()

    send(page, "Read notes.txt")
    turn = last_turn(page)
    expect(turn.locator(".you .task")).to_contain_text("Attached: notes.txt, pasted.txt")
    expect(turn.locator(".card.answer")).to_contain_text("buy milk", timeout=WAIT_MS)
    expect(attachments(page)).to_have_count(0)
    expect(page.locator("#task")).to_have_value("")

    # What the upload refuses is said where a refused send is, and nothing is named.
    page.evaluate(DROP, [".timeline", "../escape.txt", "x"])
    expect(page.locator("#send-error")).to_contain_text("escape.txt", timeout=WAIT_MS)
    expect(attachments(page)).to_have_count(0)

    # On a phone, a drop on the sidebar is taken too, and the button sits beside the task box.
    page.set_viewport_size(PHONE)
    page.evaluate(DROP, [".sidebar", "phone.txt", "from a phone\n"])
    expect(attachments(page)).to_have_text(["phone.txt"], timeout=WAIT_MS)
    expect(page.locator("label[for=attach-file]")).to_be_in_viewport(ratio=1)
    expect(page.locator("#task-form button[type=submit]")).to_be_in_viewport(ratio=1)
    page.locator("#task-form").screenshot(path=ARTIFACTS / "composer-phone.png")
    assert violations == []


def test_each_kind_of_preview_renders(live_site, browser):  # noqa: F811
    workspace = workspace_of_alice()
    (workspace / "notes.md").write_text(REPORT)
    (workspace / "area.py").write_text(CODE)
    (workspace / "page.html").write_text('<p id="served">served</p><script>window.ran = 1</script>')
    (workspace / "data.csv").write_bytes(DATA_CSV)
    (workspace / "red.png").write_bytes(png(40, 20))
    (workspace / "fake.png").write_text("<script>window.ran = 1</script>")
    (workspace / "report.pdf").write_bytes(b"%PDF-1.4\n")
    violations: list[str] = []
    page = person(browser, live_site, violations)

    def open_preview(name: str) -> Locator:
        page.goto(f"{live_site}/files/")
        page.get_by_role("link", name=name, exact=True).click()
        page.wait_for_url(f"{live_site}/files/view/{name}")
        return page.locator(".preview")

    shown = open_preview("notes.md")
    expect(shown.locator("th")).to_have_count(4)
    assert border_width(shown.locator("td").first) == "1px"
    page.locator(".files-layout").screenshot(path=ARTIFACTS / "files-preview.png")

    shown = open_preview("area.py")
    expect(shown.locator("pre.highlight .k").first).to_have_text("def")
    expect(shown.get_by_role("button", name="Copy code")).to_be_visible()

    shown = open_preview("page.html")
    expect(shown).to_contain_text('<p id="served">served</p><script>')
    expect(page.locator("#served")).to_have_count(0)
    assert page.evaluate("window.ran") is None

    shown = open_preview("data.csv")
    expect(shown.locator("th")).to_have_text(["name", "count"])
    expect(shown.locator("tbody tr")).to_have_count(3)
    expect(shown.locator("tbody tr").last.locator("td")).to_have_text(["gamma", "3 and more words"])

    shown = open_preview("red.png")
    image = shown.get_by_role("img", name="red.png")
    expect(image).to_be_visible()
    assert image.evaluate("img => img.complete && img.naturalWidth") == 40

    page.goto(f"{live_site}/files/view/fake.png")
    expect(page.get_by_role("alert")).to_contain_text("is not the image its name says")
    assert page.evaluate("window.ran") is None

    shown = open_preview("report.pdf")
    expect(shown).to_contain_text("PDF files are not shown here")
    with page.expect_download() as download:
        shown.get_by_role("link", name="Download report.pdf").click()
    assert Path(download.value.path()).read_bytes() == b"%PDF-1.4\n"
    assert violations == []
