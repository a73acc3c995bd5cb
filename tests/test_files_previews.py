"""The Files panel's previews, kind by kind (workspace/previews.py): Markdown rendered, code
highlighted, HTML as source only, a CSV as a table of its first rows, an image shown only when it
is one (and then in a sandbox of its own), a PDF offered as a download; and none of them reaching
outside the person's own workspace."""

import html
import io
import json
import re
import struct
import zlib
from pathlib import Path

import pytest

from chat.rendering import card_for, render_card
from core.events import ToolCallFinished
from core.results import ToolStatus
from tests.test_chat_views import ActiveParts
from tests.test_files_panel import put
from tools.context import context_for
from workspace import images, previews
from workspace.previews import PreviewKind, kind_of

pytestmark = pytest.mark.django_db


def png(width: int = 2, height: int = 1) -> bytes:
    """A real PNG of opaque red pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def workspace(alice, workspaces, client) -> Path:
    client.force_login(alice)
    return context_for(alice).workspace


def preview_of(client, path: str) -> str:
    """The preview part of a file's page."""
    page = client.get(f"/files/view/{path}")
    assert page.status_code == 200, page.content
    body = page.content.decode()
    return body[body.index('<div class="preview') : body.index("</main>")]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", fragment))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("notes.md", PreviewKind.MARKDOWN),
        ("README.markdown", PreviewKind.MARKDOWN),
        ("tool.py", PreviewKind.CODE),
        ("page.HTML", PreviewKind.CODE),
        ("logo.svg", PreviewKind.CODE),
        ("data.csv", PreviewKind.TABLE),
        ("data.tsv", PreviewKind.TABLE),
        ("photo.JPG", PreviewKind.IMAGE),
        ("report.pdf", PreviewKind.PDF),
        ("notes.txt", PreviewKind.TEXT),
        ("no-suffix", PreviewKind.TEXT),
    ],
)
def test_a_files_kind_is_read_from_its_name(name, kind):
    assert kind_of(name) == kind


def test_markdown_is_rendered_with_its_table_and_highlighted_code(client, workspace):
    put(
        workspace,
        "notes.md",
        "# Plan\n\n| a | b |\n|---|---|\n| 6 | 7 |\n\n```python\nx = 1\n```\n",
    )
    shown = preview_of(client, "notes.md")
    assert 'data-preview="markdown"' in shown
    assert "<h1>Plan</h1>" in shown
    assert "<th>a</th>" in shown
    assert '<pre class="highlight"><code><span class="n">x</span>' in shown


def test_code_is_highlighted(client, workspace):
    put(workspace, "tool.py", "def run():\n    return 1\n")
    shown = preview_of(client, "tool.py")
    assert 'data-preview="code"' in shown
    assert '<span class="k">def</span>' in shown
    assert text_of(shown).strip().startswith("def run():\n    return 1")


@pytest.mark.parametrize("name", ["page.html", "logo.svg"])
def test_html_and_svg_are_shown_as_source_never_as_markup(client, workspace, name):
    source = '<svg onload="alert(1)"><script>alert(2)</script></svg><img src=x onerror=alert(3)>'
    put(workspace, name, source)
    shown = preview_of(client, name)
    assert source in text_of(shown)
    assert ActiveParts(shown).found == []
    assert "<svg" not in shown
    assert "<img" not in shown


def test_a_markdown_file_cannot_smuggle_a_script(client, workspace):
    put(workspace, "evil.md", "<script>alert(1)</script>\n\n[x](javascript:alert(1))\n")
    shown = preview_of(client, "evil.md")
    assert ActiveParts(shown).found == []
    assert "&lt;script&gt;" in shown


def test_a_csv_is_a_table_of_its_first_rows(client, workspace):
    rows = ["name,count", '"Smith, <b>J</b>",1'] + [f"row{n},{n}" for n in range(100)]
    put(workspace, "data.csv", "\n".join(rows) + "\n")
    shown = preview_of(client, "data.csv")
    assert re.findall(r"<th scope=\"col\">([^<]*)</th>", shown) == ["name", "count"]
    assert "<td>Smith, &lt;b&gt;J&lt;/b&gt;</td>" in shown  # a quoted comma; markup as text
    assert shown.count("<tr>") == previews.TABLE_ROWS
    assert f"The first {previews.TABLE_ROWS} rows are shown" in shown


def test_a_tsv_splits_on_tabs(client, workspace):
    put(workspace, "data.tsv", "a\tb\n1,5\t2\n")
    shown = preview_of(client, "data.tsv")
    assert "<td>1,5</td><td>2</td>" in shown
    assert "rows are shown" not in shown


def test_an_image_is_shown_from_its_own_url_in_a_sandbox(client, workspace):
    put(workspace, "pics/red.png", png())
    shown = preview_of(client, "pics/red.png")
    assert '<img src="/files/image/pics/red.png" alt="pics/red.png">' in shown
    image = client.get("/files/image/pics/red.png")
    assert image.status_code == 200
    assert image["Content-Type"] == "image/png"
    assert image["X-Content-Type-Options"] == "nosniff"
    assert image["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert b"".join(image.streaming_content) == png()


@pytest.mark.parametrize("name", ["fake.png", "fake.gif", "fake.webp", "fake.jpg"])
def test_a_file_named_like_an_image_that_is_not_one_is_never_served_as_one(client, workspace, name):
    put(workspace, name, "<html><script>alert(1)</script></html>")
    page = client.get(f"/files/view/{name}")
    assert page.status_code == 400
    assert "is not the image its name says" in page.content.decode()
    assert f'href="/files/raw/{name}" download' in page.content.decode()
    assert client.get(f"/files/image/{name}").status_code == 404


def claimed(suffix: str, width: int, height: int) -> bytes:
    """A header of the kind that claims a size, and no pixels (what a browser would decode)."""
    if suffix == ".png":
        return png(1, 1).replace(struct.pack(">II", 1, 1), struct.pack(">II", width, height), 1)
    if suffix == ".gif":
        return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"
    if suffix == ".jpg":
        app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        frame = b"\xff\xc2\x00\x11\x08" + struct.pack(">HH", height, width) + b"\x03" + bytes(9)
        return b"\xff\xd8" + app0 + b"\xff\xff" + frame + b"\xff\xd9"  # a fill byte, too
    chunk = {
        ".vp8x.webp": b"VP8X\x0a\x00\x00\x00"
        + bytes(4)
        + (width - 1).to_bytes(3, "little")
        + (height - 1).to_bytes(3, "little"),
        ".vp8.webp": b"VP8 \x0a\x00\x00\x00\x00\x00\x00\x9d\x01\x2a"
        + struct.pack("<HH", width, height),
        ".vp8l.webp": b"VP8L\x05\x00\x00\x00\x2f"
        + ((width - 1) | (height - 1) << 14).to_bytes(4, "little"),
    }[suffix]
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


# Each kind claiming more than an image may have (a WebP frame's sides stop at 16,383).
HUGE = [
    (".png", 20_000, 20_000),
    (".gif", 20_000, 20_000),
    (".jpg", 20_000, 20_000),
    (".vp8x.webp", 20_000, 20_000),
    (".vp8.webp", 16_000, 16_000),
    (".vp8l.webp", 16_000, 16_000),
    (".png", 10_001, 1),  # a side too long
    (".png", 7_000, 7_000),  # each side shown, but 49 million pixels
]


@pytest.mark.parametrize(("suffix", "width", "height"), [*HUGE, (".jpg", 4_000, 3_000)])
def test_an_image_s_size_is_read_from_its_header(suffix, width, height):
    assert images.size_of(io.BytesIO(claimed(suffix, width, height))) == images.Size(width, height)


@pytest.mark.parametrize(("suffix", "width", "height"), HUGE)
def test_an_image_claiming_too_many_pixels_is_not_shown_but_offered_as_a_download(
    client, workspace, suffix, width, height
):
    name = f"huge{suffix}"
    put(workspace, name, claimed(suffix, width, height))
    page = client.get(f"/files/view/{name}")
    assert page.status_code == 400
    said = f"{name} is not shown here: it is {width:,} by {height:,} pixels, over the 10,000 a side"
    assert said in page.content.decode()
    assert "<img" not in page.content.decode()
    assert f'href="/files/raw/{name}" download' in page.content.decode()
    assert client.get(f"/files/image/{name}").status_code == 404
    assert client.get(f"/files/raw/{name}").status_code == 200


@pytest.mark.parametrize(("suffix", "width", "height"), [(".jpg", 4_000, 3_000), (".gif", 1, 1)])
def test_an_image_of_a_size_loop_shows_is_shown(client, workspace, suffix, width, height):
    put(workspace, f"photo{suffix}", claimed(suffix, width, height))
    assert f'<img src="/files/image/photo{suffix}"' in preview_of(client, f"photo{suffix}")
    assert client.get(f"/files/image/photo{suffix}").status_code == 200


def test_a_pdf_is_offered_as_a_download(client, workspace):
    put(workspace, "report.pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    shown = preview_of(client, "report.pdf")
    assert "PDF files are not shown here" in shown
    assert 'href="/files/raw/report.pdf" download' in shown


def test_a_text_file_is_text(client, workspace):
    put(workspace, "notes.txt", "plain <b>words</b>\n")
    shown = preview_of(client, "notes.txt")
    assert '<pre class="file-text">plain &lt;b&gt;words&lt;/b&gt;\n</pre>' in shown


@pytest.mark.parametrize("name", ["notes.md", "tool.py", "data.csv", "red.png", "doc.pdf"])
def test_another_persons_file_of_any_kind_does_not_exist_for_you(client, workspace, bob, name):
    put(workspace, name, png() if name.endswith(".png") else "alice's own")
    client.force_login(bob)
    assert client.get(f"/files/view/{name}").status_code == 404
    assert client.get(f"/files/image/{name}").status_code == 404


@pytest.mark.parametrize(
    "path",
    ["../10/red.png", "%2e%2e/red.png", "/etc/passwd", "pics/../../red.png", "red.png%00.md"],
)
def test_a_path_out_of_the_workspace_is_refused(client, workspace, path):
    put(workspace, "red.png", png())
    for url in (f"/files/view/{path}", f"/files/image/{path}"):
        assert client.get(url).status_code in (400, 404), url


def test_an_image_through_a_symlink_is_never_served(client, workspace, tmp_path):
    outside = tmp_path / "secret.png"
    outside.write_bytes(png())
    (workspace / "link.png").symlink_to(outside)
    assert client.get("/files/image/link.png").status_code == 400
    assert client.get("/files/view/link.png").status_code == 400


def test_a_stranger_is_asked_to_log_in(client):
    for url in ("/files/view/a.md", "/files/image/a.png"):
        response = client.get(url)
        assert response.status_code == 302
        assert "/accounts/login/" in response["Location"]


def test_htmx_gets_the_preview_alone_for_a_tool_card(client, workspace):
    put(workspace, "notes.md", "| a |\n|---|\n| 1 |\n")
    fragment = client.get("/files/view/notes.md", headers={"HX-Request": "true"})
    body = fragment.content.decode()
    assert fragment.status_code == 200
    assert "<html" not in body
    assert body.strip().startswith('<p class="file-actions">')
    assert "<td>1</td>" in body
    missing = client.get("/files/view/gone.md", headers={"HX-Request": "true"})
    assert missing.status_code == 404
    assert "<html" not in missing.content.decode()


@pytest.mark.parametrize(
    ("status", "previewed"), [(ToolStatus.OK, True), (ToolStatus.ERROR, False)]
)
def test_a_file_tools_card_previews_its_file_only_when_the_call_worked(status, previewed):
    event = ToolCallFinished(
        step=1,
        call_id="c1",
        tool="write_file",
        arguments=json.dumps({"path": "my notes/plan.md", "content": "# Plan"}),
        status=status,
        text="Wrote it.",
        duration=0.01,
    )
    html = render_card(card_for(7, 3, event))
    preview = 'hx-get="/files/view/my%20notes/plan.md" hx-trigger="toggle once"'
    assert (preview in html) is previewed


def test_a_quoted_field_may_hold_a_line_break(client, workspace):
    put(workspace, "notes.csv", 'who,said\nann,"two\nlines"\n')
    shown = preview_of(client, "notes.csv")
    assert "<td>ann</td><td>two\nlines</td>" in shown


def test_a_csv_that_is_no_table_is_shown_as_its_text(client, workspace):
    put(workspace, "odd.csv", "a,b\n" + "x" * 200_000)  # a field past csv's own limit
    shown = preview_of(client, "odd.csv")
    assert 'data-preview="text"' in shown
    assert "a,b\nxxx" in shown
