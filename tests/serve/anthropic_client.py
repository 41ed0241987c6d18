#!/usr/bin/env python3
"""`k3 serve` against the official `anthropic` Python client (issue 24, ENGINE.md §11).

Run by .ci/run in a virtual environment with `anthropic` and `openai` installed:
    python3 tests/serve/anthropic_client.py target/debug/k3 tests/fixtures/tiny-k3-text

Starts servers on 127.0.0.1 with --port 0 (loopback only), checks, and stops them; every wait
is bounded and the whole script is killed after HARD_TIMEOUT. Checks: Messages streamed and
not (the stream accumulated by the client equals the whole reply), thinking on, off and with
a budget, stop sequences, count_tokens, the same ids as chat completions at temperature 0
(through the `openai` client), errors raised as the client's typed exceptions, and with the
forced-reply hook (K3_TEST_FORCE_IDS) a reply with a think section and a tool call, sent back
as a tool_use → tool_result round trip (the thinking's signature accepted, a changed one
refused, the prefix reused).
"""

import json

import anthropic
import openai

import k3server
from k3server import MODEL, TOOL_REPLY, check

HARD_TIMEOUT = 180
TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
    for t in TOOLS]


class Server(k3server.Server):
    """A k3server.Server with an `anthropic` client at its root (it appends /v1/messages
    itself) and an `openai` one at its /v1."""

    def __init__(self, args, env=None):
        super().__init__(args, env)
        self.client = anthropic.Anthropic(base_url=self.url, api_key="sekrit", max_retries=0,
                                          timeout=120)
        self.openai = openai.OpenAI(base_url=self.url + "/v1", api_key="sekrit",
                                    max_retries=0, timeout=120)


def comparable(m):
    """A message with what may differ between identical requests removed."""
    d = m.model_dump()
    d.pop("id")
    d.pop("usage")
    return d


def streamed(client, **kw):
    """The message the client accumulates from a stream, and the event types seen."""
    kinds = []
    with client.messages.stream(**kw) as s:
        for ev in s:
            kinds.append(ev.type)
        return s.get_final_message(), kinds


def plain(s):
    """Thinking on, off and with a budget; stop sequences; count_tokens; streamed == whole;
    the same ids as chat completions at temperature 0; errors."""
    c = s.client
    user = [{"role": "user", "content": "Tell me a story."}]
    # this client has no `temperature` argument: the server's field, sent as extra_body
    base = dict(model=MODEL, max_tokens=10, messages=user, extra_body={"temperature": 0})
    on = c.messages.create(**base)
    check(on.type == "message" and on.role == "assistant" and on.model == MODEL,
          "a message in Anthropic's shape")
    check(on.content[0].type == "thinking" and on.content[0].signature.startswith("k3s1."),
          "thinking on by default: a signed thinking block first")
    check(on.stop_reason == "max_tokens" and on.usage.output_tokens == 10,
          "stop_reason max_tokens, output_tokens counted")
    fin, kinds = streamed(c, **base)
    check(comparable(fin) == comparable(on), "streamed (accumulated by the client) == whole")
    check(kinds[0] == "message_start" and "content_block_delta" in kinds
          and kinds[-1] == "message_stop", f"the stream's events in order ({kinds[:3]}...)")
    # the same conversation through chat completions: the same ids, so the same text
    cc = s.openai.chat.completions.create(model=MODEL, max_tokens=10, temperature=0,
                                          messages=user)
    msg = cc.choices[0].message
    text = "".join(b.text for b in on.content if b.type == "text")
    check(on.content[0].thinking == getattr(msg, "reasoning_content", None)
          and text == (msg.content or ""),
          "temperature 0: the same reply as chat completions (thinking on)")
    cached = on.usage.cache_read_input_tokens or 0
    check(on.usage.input_tokens + cached == cc.usage.prompt_tokens,
          "input_tokens + cache_read_input_tokens == chat completions' prompt_tokens")
    n = c.messages.count_tokens(model=MODEL, messages=user)
    check(n.input_tokens == cc.usage.prompt_tokens, f"count_tokens: {n.input_tokens}")
    # thinking off, a system prompt
    off = c.messages.create(**base, system="Be brief.", thinking={"type": "disabled"})
    check(all(b.type == "text" for b in off.content), "thinking disabled: no thinking block")
    cc = s.openai.chat.completions.create(
        model=MODEL, max_tokens=10, temperature=0,
        messages=[{"role": "system", "content": "Be brief."}] + user,
        extra_body={"chat_template_kwargs": {"thinking": False}})
    check(off.content[0].text == cc.choices[0].message.content,
          "temperature 0: the same reply as chat completions (thinking off, system)")
    fin, _ = streamed(c, **base, system="Be brief.", thinking={"type": "disabled"})
    check(comparable(fin) == comparable(off), "thinking off: streamed == whole")
    # a budget of 2 think ids: the channel is closed as the template writes it
    b = c.messages.create(**{**base, "max_tokens": 14},
                          thinking={"type": "enabled", "budget_tokens": 2})
    check(b.content[0].type == "thinking" and b.content[1].type == "text"
          and on.content[0].thinking.startswith(b.content[0].thinking)
          and len(b.content[0].thinking) < len(on.content[0].thinking),
          "budget_tokens 2: two think ids, then the response")
    fin, _ = streamed(c, **{**base, "max_tokens": 14},
                      thinking={"type": "enabled", "budget_tokens": 2})
    check(comparable(fin) == comparable(b), "budget: streamed == whole")
    # stop sequences: the first two characters of the text, as a stop sequence
    t = off.content[0].text
    stop = t[3:6]
    if stop.strip():
        sq = c.messages.create(**base, system="Be brief.", thinking={"type": "disabled"},
                               stop_sequences=[stop])
        check(sq.stop_reason == "stop_sequence" and sq.stop_sequence == stop
              and sq.content[0].text == t[:t.index(stop)],
              f"stop_sequences: stops before {stop!r} and names it")
        fin, _ = streamed(c, **base, system="Be brief.", thinking={"type": "disabled"},
                          stop_sequences=[stop])
        check(comparable(fin) == comparable(sq), "stop sequence: streamed == whole")
    # errors as the client's typed exceptions
    try:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=user)
        check(False, "another model id is refused")
    except anthropic.NotFoundError as e:
        check("claude-sonnet-4-5" in str(e), "another model id: anthropic.NotFoundError")
    try:
        c.messages.create(model=MODEL, max_tokens=5, messages=user, extra_body={"top_k": "x"})
        check(False, "a bad field is refused")
    except anthropic.BadRequestError as e:
        check(e.body["error"]["type"] == "invalid_request_error"
              and e.body["error"]["message"].startswith("top_k:"),
              "a bad field: anthropic.BadRequestError naming it")
    bad = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0, timeout=30)
    try:
        bad.messages.create(model=MODEL, max_tokens=5, messages=user)
        check(False, "a wrong key is refused")
    except anthropic.AuthenticationError:
        check(True, "a wrong x-api-key: anthropic.AuthenticationError")


def tools():
    """A forced reply with a think section and a tool call; the round trip."""
    t = Server(["--ctx", "1024", "--threads", "1", "--api-key", "sekrit"],
               {"K3_TEST_FORCE_IDS": TOOL_REPLY})
    c = t.client
    user = {"role": "user", "content": "Weather in Paris?"}
    kw = dict(model=MODEL, max_tokens=100, tools=TOOLS, messages=[user])
    r = c.messages.create(**kw)
    check(r.stop_reason == "tool_use", "stop_reason tool_use")
    kinds = [b.type for b in r.content]
    check(kinds == ["thinking", "text", "tool_use"], f"blocks {kinds}")
    check(r.content[0].thinking == "Let me check." and r.content[1].text == "Checking.",
          "thinking and text beside the call")
    call = r.content[2]
    check(call.name == "get_weather" and call.input == {"city": "Paris"},
          "tool_use with its input parsed")
    again = c.messages.create(**kw)
    check(again.content[2].id == call.id, f"the tool_use id is reproducible ({call.id})")
    fin, kinds = streamed(c, **kw)
    check(comparable(fin) == comparable(r), "tools: streamed (input_json_delta) == whole")
    # chat completions over the same conversation: the same reply
    cc = t.openai.chat.completions.create(model=MODEL, messages=[user], tools=OPENAI_TOOLS)
    m = cc.choices[0].message
    check(m.content == "Checking." and json.loads(m.tool_calls[0].function.arguments)
          == call.input, "the same forced reply through chat completions")
    # the round trip: the assistant turn given back as the client has it, then the result
    follow = [user, {"role": "assistant", "content": r.content},
              {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"},
                  {"type": "text", "text": "Thanks."}]}]
    f = c.messages.create(model=MODEL, max_tokens=60, tools=TOOLS, messages=follow)
    check(f.usage.cache_read_input_tokens > 0,
          f"tool_result round trip reuses the prefix ({f.usage.cache_read_input_tokens} cached)")
    cc_follow = [user,
                 {"role": "assistant", "content": "Checking.", "reasoning_content": "Let me check.",
                  "tool_calls": [{"id": call.id, "type": "function", "function": {
                      "name": "get_weather", "arguments": json.dumps(call.input)}}]},
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"},
                 {"role": "user", "content": "Thanks."}]
    n = c.messages.count_tokens(model=MODEL, tools=TOOLS, messages=follow)
    ccf = t.openai.chat.completions.create(model=MODEL, messages=cc_follow, tools=OPENAI_TOOLS,
                                           max_tokens=1)
    check(n.input_tokens == ccf.usage.prompt_tokens,
          "the round trip renders as the same conversation through chat completions")
    changed = [user, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Something else.",
         "signature": r.content[0].signature}, r.content[1], r.content[2]]}, follow[2]]
    try:
        c.messages.create(model=MODEL, max_tokens=5, tools=TOOLS, messages=changed)
        check(False, "a changed thinking block is refused")
    except anthropic.BadRequestError as e:
        check("messages[1].content[0].signature" in str(e),
              "a changed thinking block: 400 naming its signature")
    check(t.stop() == 0, "SIGTERM drains and exits 0")


def main():
    k3server.watchdog(HARD_TIMEOUT)
    s = Server(["--ctx", "1024", "--threads", "1", "--api-key", "sekrit"])
    plain(s)
    check(s.stop() == 0, "SIGTERM drains and exits 0")
    tools()
    print("anthropic client: all checks passed")


if __name__ == "__main__":
    main()
