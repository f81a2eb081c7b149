"""Which model a worker's agents talk to, and that a real OpenAI-compatible endpoint works.

The endpoint is a stub HTTP server started here, speaking just enough Chat Completions: the
agent saga runs through the SDK's real OpenAI client, HTTP and all, with a dummy key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.client import Client

from sagacity.agents import (
    AgentSagaRequest,
    ScriptedModel,
    ScriptedModelProvider,
    model_provider_from_settings,
    uses_scripted_model,
)
from sagacity.settings import Settings, load_settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal import sample_tools
from tests.temporal.conftest import phases
from workflows.agent_order.script import SCRIPTS


def test_without_a_key_the_model_is_scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "SAGACITY_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert uses_scripted_model(settings)
    provider = model_provider_from_settings(settings, scripts=SCRIPTS)
    assert isinstance(provider, ScriptedModelProvider)
    assert isinstance(provider.get_model(None), ScriptedModel)


def test_a_key_in_the_environment_selects_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy")
    monkeypatch.setenv("SAGACITY_MODEL", "gpt-test")
    settings = load_settings()
    assert not uses_scripted_model(settings)
    assert settings.model == "gpt-test"
    assert "sk-dummy" not in repr(settings)  # the key is a secret, not printed
    provider = model_provider_from_settings(settings, scripts=SCRIPTS)
    assert not isinstance(provider, ScriptedModelProvider)


class _ChatStub(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: ask for ``set_flag`` once, then answer in text."""

    requests: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "auth": self.headers["Authorization"], **body})
        if any(m.get("role") == "tool" for m in body["messages"]):
            message: dict[str, Any] = {"role": "assistant", "content": "Flag x is set."}
            finish = "stop"
        else:
            call = {"name": "set_flag", "arguments": json.dumps({"name": "x"})}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        reply = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def chat_stub() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local OpenAI-compatible server: its base URL and the requests it received."""
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_ChatStub,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_agent_saga_runs_against_an_openai_compatible_server(
    temporal_client: Client,
    agent_worker: WorkerFactory,
    journal: JournalStore,
    settings: Settings,
    chat_stub: tuple[str, list[dict[str, Any]]],
) -> None:
    base_url, requests = chat_stub
    sample_tools.EFFECTS.clear()
    configured = settings.model_copy(
        update={
            "openai_api_key": "sk-dummy",
            "openai_base_url": base_url,
            "model": "stub-model",
        }
    )
    configured = Settings.model_validate(configured.model_dump())  # the key as a SecretStr
    provider = model_provider_from_settings(configured, scripts=SCRIPTS)
    async with agent_worker(provider=provider) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt="set the x flag", tools=["set_flag"]),
        )
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    assert result.final_output == "Flag x is set."
    assert await phases(journal, handle.id) == [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]
    assert sample_tools.EFFECTS == ["set x"]
    # what went over the wire: the key, the configured model, the tool with its strict schema
    first = requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-dummy"
    assert first["model"] == "stub-model"
    (tool,) = first["tools"]
    assert tool["function"]["name"] == "set_flag" and tool["function"]["strict"] is True
    assert tool["function"]["parameters"]["required"] == ["name"]
    # the second request carried the tool's journaled result back to the model
    tool_message = next(m for m in requests[1]["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"]) == "x"
