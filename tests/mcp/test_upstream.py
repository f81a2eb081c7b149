"""The result convention, on results as the mcp package builds them."""

from __future__ import annotations

import hashlib

from mcp.types import CallToolResult, ImageContent, TextContent

from sagacity.mcp.upstream import RESULT_CHARS, call_result, journaled


def test_the_text_restating_structured_content_is_left_out_and_put_back() -> None:
    result = CallToolResult(
        content=[TextContent(text='{\n  "id": "T-1"\n}')], structured_content={"id": "T-1"}
    )
    data = journaled(result)
    assert data == {"content": [], "structuredContent": {"id": "T-1"}}
    rebuilt = call_result(data)
    assert rebuilt.structured_content == {"id": "T-1"} and not rebuilt.is_error
    assert [b.text for b in rebuilt.content if isinstance(b, TextContent)] == ['{"id": "T-1"}']


def test_text_that_says_more_than_the_structured_content_is_kept() -> None:
    result = CallToolResult(
        content=[TextContent(text="T-1 opened"), ImageContent(data="iVBO", mime_type="image/png")],
        structured_content={"id": "T-1"},
    )
    assert journaled(result)["content"] == [
        {"type": "text", "text": "T-1 opened"},
        {"type": "image", "data": "iVBO", "mimeType": "image/png"},
    ]


def test_a_result_over_the_limit_loses_its_largest_parts_first() -> None:
    big = "x" * RESULT_CHARS
    result = CallToolResult(
        content=[TextContent(text="small"), TextContent(text=big)],
        structured_content={"id": "T-1"},
    )
    data = journaled(result)
    assert data["content"][0] == {"type": "text", "text": "small"}
    assert data["content"][1]["text"].startswith("[left out by Sagacity: a text block of")
    assert data["structuredContent"] == {"id": "T-1"}  # it fitted once the text was gone

    huge = CallToolResult(content=[], structured_content={"id": "T-2", "rows": [big]})
    data = journaled(huge)
    # its long string is cut, with its length and digest; the rest (result.id) is kept
    assert data["structuredContent"]["id"] == "T-2"
    assert data["structuredContent"]["rows"][0].startswith(
        f"[cut by Sagacity: a string of {RESULT_CHARS} characters, sha256 "
        f"{hashlib.sha256(big.encode()).hexdigest()}"
    )

    many = CallToolResult(content=[], structured_content={"rows": ["y" * 100] * 10_000})
    data = journaled(many)
    assert "structuredContent" not in data
    assert data["content"][0]["text"].startswith("[left out by Sagacity: the structured content")
