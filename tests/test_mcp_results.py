"""An MCP answer's facts as fields: the images `mcp_servers.results` kept travel beside the text
(`Rendered.saved`), through the tool's result (`ToolResult.saved`) and the event that records the
call (`ToolCallFinished.saved`), to the card, which never reads them from the text. A call recorded
before Loop kept them loads as one that saved nothing."""

import base64
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
from pydantic import BaseModel

from core.events import ToolCallFinished, event_from_dict, loaded
from core.results import ToolStatus
from mcp_servers.results import Rendered, Store, rendered
from tests.mcp_servers.app import tiny_png
from tools.base import Tool, ToolContext, ToolError, ToolOutput, ToolRegistry

PNG = base64.b64encode(tiny_png()).decode()
OTHER_PNG = base64.b64encode(tiny_png(3, 3)).decode()


def answer(*blocks: types.ContentBlock, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(blocks), is_error=is_error)


def kept_in(store: dict[str, bytes]) -> Store:
    def keep(path: str, data: bytes) -> str:
        store[path] = data
        return f"Wrote {len(data)} bytes to {path}."

    return keep


def said(result: types.CallToolResult, store: dict[str, bytes] | None = None) -> Rendered:
    keep = kept_in({} if store is None else store)
    return rendered(result, server="Demo", tool="image", prefix="demo", store=keep)


def image(data: str, mime_type: str = "image/png") -> types.ImageContent:
    return types.ImageContent(type="image", data=data, mime_type=mime_type)


def text(words: str) -> types.TextContent:
    return types.TextContent(type="text", text=words)


def test_the_images_kept_are_the_answers_saved_paths_each_once_in_order():
    store: dict[str, bytes] = {}
    result = said(answer(image(PNG), text("and"), image(OTHER_PNG), image(PNG)), store)
    assert len(result.saved) == 2
    assert list(result.saved) == list(dict.fromkeys(store))
    for path in result.saved:
        assert path.startswith("mcp/demo/image-")
        assert path.endswith(".png")
        assert f"[image saved in the workspace as {path}]" in result.text


def test_a_text_naming_a_saved_image_saves_nothing():
    claimed = "[image saved in the workspace as mcp/demo/image-0123456789ab.png]"
    result = said(answer(text(claimed)))
    assert result.saved == ()
    assert claimed in result.text


@pytest.mark.parametrize(
    "block",
    [
        image(PNG, mime_type="image/svg+xml"),  # not a kind kept
        image("not base64!"),
        types.AudioContent(type="audio", data=PNG, mime_type="audio/wav"),
    ],
)
def test_an_image_not_kept_is_not_saved(block):
    assert said(answer(block)).saved == ()


def test_an_image_the_store_refuses_is_not_saved():
    def full(path: str, data: bytes) -> str:
        raise OSError("No space left on device")

    result = rendered(answer(image(PNG)), server="Demo", tool="image", prefix="demo", store=full)
    assert result.saved == ()
    assert "[image not kept: No space left on device]" in result.text


class NoArguments(BaseModel):
    pass


def registry_of(function: Callable[[Any, ToolContext], ToolOutput]) -> ToolRegistry:
    return ToolRegistry([Tool("keeper", "Keeps a file.", NoArguments, function, own_deadline=True)])


@pytest.mark.parametrize("fails", [False, True])
def test_a_tools_saved_files_reach_its_result_whether_it_worked_or_failed(tmp_path, fails):
    """An MCP error answer may carry images too: its error says what it saved."""
    saved = ("mcp/demo/image-0123456789ab.png",)

    def keeper(arguments: Any, context: ToolContext) -> ToolOutput:
        if fails:
            raise ToolError("it failed, after keeping an image", saved=saved)
        return ToolOutput("kept an image", saved=saved)

    result = registry_of(keeper).dispatch("keeper", "{}", ToolContext(1, "alice", tmp_path))
    assert result.status is (ToolStatus.ERROR if fails else ToolStatus.OK)
    assert result.saved == saved
    assert result.as_dict()["saved"] == list(saved)


def finished(**fields: Any) -> ToolCallFinished:
    return ToolCallFinished(
        step=1,
        call_id="c",
        tool="demo__image",
        arguments="{}",
        status=ToolStatus.OK,
        text="image on MCP server Demo answered",
        duration=0.01,
        **fields,
    )


def test_the_saved_paths_are_stored_and_read_back_with_the_event():
    event = finished(saved=["mcp/demo/image-0123456789ab.png"])
    stored = event.as_dict()
    assert stored["saved"] == ["mcp/demo/image-0123456789ab.png"]
    assert event_from_dict(event.kind, stored) == event


def test_a_call_recorded_before_loop_kept_saved_files_loads_as_saving_none():
    stored = finished().as_dict()
    del stored["saved"]
    old = loaded("tool_call_finished", stored)
    assert isinstance(old, ToolCallFinished)
    assert old.saved == []
    assert old == finished()
