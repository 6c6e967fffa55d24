"""POST /v1/responses (OpenAI Responses) and POST /v1/messages (Anthropic
Messages) through the official `openai` and `anthropic` clients, on the
tiny_dsml checkpoint with a scripted output (see test_tools.py): the same
conversation path as Chat Completions, the answers and event streams in
each API's shapes; tool calls round-trip (function_call /
function_call_output items; tool_use / tool_result blocks)."""
import json

import anthropic
import pytest

from conftest import API_KEY, SLOW
from test_tools import WEATHER

SCHEMA = WEATHER["function"]["parameters"]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city.", "parameters": SCHEMA}]
MSG_TOOLS = [{"name": "get_weather", "description": "Weather of a city.", "input_schema": SCHEMA}]


# The sanitizer build (DI_TEST_SLOW > 1) skips the generations with long
# tool prompts (the tiny V4.1 forward under ASan is slow); the parsing,
# shapes and event paths run there in tests/server/test_dsml_chat.c.
heavy = pytest.mark.skipif(SLOW > 1, reason="sanitizer build: kept light")


@heavy
def test_responses_tool_round_trip(tiny):
    c = tiny.client()
    r = c.responses.create(model="tiny_dsml", input="Weather in Paris?", tools=RESP_TOOLS, max_output_tokens=200)
    assert r.status == "completed"
    kinds = [o.type for o in r.output]
    assert kinds == ["reasoning", "message", "function_call"]
    assert r.output[0].content[0].text == "Need the tool."
    assert r.output_text == "Checking."
    call = r.output[2]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert r.usage.input_tokens > 100 and r.usage.output_tokens > 0
    r2 = c.responses.create(model="tiny_dsml", tools=RESP_TOOLS, max_output_tokens=200, input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp": 21})}])
    assert r2.output_text == "It is 21 degrees in Paris."


@heavy
def test_responses_stream_events(tiny):
    c = tiny.client()
    events = list(c.responses.create(model="tiny_dsml", input="Weather in Paris?", tools=RESP_TOOLS,
                                     max_output_tokens=200, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert (reasoning, text, json.loads(args)) == ("Need the tool.", "Checking.", {"city": "Paris"})
    assert types.count("response.output_item.added") == types.count("response.output_item.done") == 3
    final = events[-1].response
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]


def messages_client(srv):
    return anthropic.Anthropic(base_url=srv.base, api_key=API_KEY, max_retries=0, timeout=120 * SLOW)


@heavy
def test_messages_tool_round_trip(tiny):
    c = messages_client(tiny)
    m = c.messages.create(model="tiny_dsml", max_tokens=200, tools=MSG_TOOLS,
                          messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
    assert m.content[0].thinking == "Need the tool." and m.content[1].text == "Checking."
    use = m.content[2]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    m2 = c.messages.create(model="tiny_dsml", max_tokens=200, tools=MSG_TOOLS, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": json.dumps({"temp": 21})}]}])
    assert m2.stop_reason == "end_turn"
    assert [b.text for b in m2.content if b.type == "text"] == ["It is 21 degrees in Paris."]


@heavy
def test_messages_stream(tiny):
    c = messages_client(tiny)
    with c.messages.stream(model="tiny_dsml", max_tokens=200, tools=MSG_TOOLS,
                           messages=[{"role": "user", "content": "Weather in Paris?"}]) as s:
        kinds = [e.type for e in s]
        m = s.get_final_message()
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
    assert m.content[2].input == {"city": "Paris"}


def test_bad_blocks_and_items_are_400(tiny):
    c = messages_client(tiny)
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(model="tiny_dsml", max_tokens=10,
                          messages=[{"role": "user", "content": [{"type": "audio", "data": "x"}]}])
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(model="tiny_dsml", max_tokens=10, tools=[{"name": "a b", "input_schema": SCHEMA}],
                          messages=[{"role": "user", "content": "x"}])
    st, _, raw = tiny.request("POST", "/v1/responses", json.dumps(
        {"model": "tiny_dsml", "input": [{"type": "computer_call", "id": "x"}]}))
    assert st == 400 and "computer_call" in json.loads(raw)["error"]["message"]
    st, _, raw = tiny.request("POST", "/v1/responses", json.dumps(
        {"model": "tiny_dsml", "input": "x", "tools": [{"type": "web_search"}]}))
    assert st == 400 and "web_search" in json.loads(raw)["error"]["message"]


def test_protocols_need_a_deepseek_model(server):
    st, _, raw = server.request("POST", "/v1/messages", json.dumps(
        {"max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}))
    assert st == 400 and "DeepSeek" in json.loads(raw)["error"]["message"]
