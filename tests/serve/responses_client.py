#!/usr/bin/env python3
"""`POST /v1/responses` against the official `openai` Python client (issue 24, ENGINE.md §11).

Run by .ci/run in the virtual environment of anthropic_client.py (whose server, with both
clients, it reuses; the harness is k3server.py: loopback, a free port, bounded waits, a hard
timeout, the server's log on failure):
    python3 tests/serve/responses_client.py target/debug/k3 tests/fixtures/tiny-k3-text

Checks: `client.responses.create` streamed and not (the client's final streamed response
equals the whole one), reasoning effort none and the default, the same text as chat
completions at temperature 0, errors raised as the client's typed exceptions, and with the
forced-reply hook (K3_TEST_FORCE_IDS) a reply with reasoning, text and a function call, sent
back as a function_call → function_call_output round trip (the prefix reused).
"""

import openai

import k3server
from anthropic_client import Server
from k3server import MODEL, TOOL_REPLY, check

HARD_TIMEOUT = 180

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]


def comparable(r):
    """A response with what may differ between identical requests removed (and the
    `parsed` fields the client's stream helper adds to what it accumulates)."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not k.startswith("parsed")}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    d = strip(r.model_dump())
    for k in ("id", "created_at", "usage"):
        d.pop(k, None)
    return d


def streamed(client, **kw):
    """The response of a stream's last event (`response.completed` or, which the client's
    stream helper does not accept, `response.incomplete`), and the event types."""
    kinds, last = [], None
    for ev in client.responses.create(stream=True, **kw):
        kinds.append(ev.type)
        last = ev
    return last.response, kinds


def helper(client, **kw):
    """The final response the client's stream helper accumulates from the deltas."""
    with client.responses.stream(**kw) as s:
        for _ in s:
            pass
        return s.get_final_response()


def plain(s):
    c = s.openai
    for effort in ({"effort": "none"}, None):
        kw = dict(model=MODEL, input="Tell me a story.", instructions="Be brief.",
                  max_output_tokens=8, temperature=0)
        if effort:
            kw["reasoning"] = effort
        r = c.responses.create(**kw)
        check(r.object == "response" and r.status == "incomplete"
              and r.incomplete_details.reason == "max_output_tokens",
              f"responses.create ({effort}): incomplete at max_output_tokens")
        chat = c.chat.completions.create(
            model=MODEL, max_tokens=8, temperature=0,
            extra_body={"chat_template_kwargs": {"thinking": False}} if effort else None,
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Tell me a story."}])
        check(r.output_text == (chat.choices[0].message.content or ""),
              f"the same text as chat completions ({effort})")
        check(r.usage.input_tokens == chat.usage.prompt_tokens,
              "input_tokens as chat completions counts the prompt")
        f, kinds = streamed(c, **kw)
        check(comparable(f) == comparable(r), f"streamed == whole ({effort})")
        check(kinds[0] == "response.created" and kinds[-1] == "response.incomplete",
              "the stream opens with response.created and ends with response.incomplete")
        raw = c.responses.create(stream=True, **kw)
        seqs = [ev.sequence_number for ev in raw]
        check(seqs == list(range(len(seqs))), "sequence numbers count from 0")
    try:
        c.responses.create(model=MODEL, input=[{"type": "function_call_output",
                                                "call_id": "nope", "output": "x"}])
        check(False, "an output that answers no call is refused")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "input[0].call_id",
              "an output answering no call: 400 naming input[0].call_id")


def tools():
    t = Server(["--ctx", "1024", "--threads", "1", "--api-key", "sekrit"],
               {"K3_TEST_FORCE_IDS": TOOL_REPLY})
    c = t.openai
    kw = dict(model=MODEL, tools=TOOLS, input="Weather in Paris?", max_output_tokens=100)
    r = c.responses.create(**kw)
    kinds = [o.type for o in r.output]
    check(kinds == ["reasoning", "message", "function_call"], f"output items {kinds}")
    check(r.output[0].content[0].text == "Let me check.", "the reasoning text")
    check(r.output_text == "Checking.", "the message text")
    call = r.output[2]
    check(call.name == "get_weather" and '"Paris"' in call.arguments, "the function call")
    f, _ = streamed(c, **kw)
    check(comparable(f) == comparable(r), "streamed == whole, with a call")
    h = helper(c, **kw)
    check(comparable(h) == comparable(r), "the client's stream helper accumulates the same")
    follow = [{"role": "user", "content": "Weather in Paris?"},
              *[o.model_dump(exclude_none=True) for o in r.output],
              {"type": "function_call_output", "call_id": call.call_id,
               "output": "Sunny, 21 C"}]
    f = c.responses.create(model=MODEL, tools=TOOLS, input=follow, max_output_tokens=3)
    check(f.status == "incomplete" and f.usage.input_tokens_details.cached_tokens > 0,
          "the function_call_output round trip reuses the prefix")
    check(t.stop() == 0, "SIGTERM drains and exits 0")


def main():
    k3server.watchdog(HARD_TIMEOUT)
    s = Server(["--ctx", "1024", "--threads", "1", "--api-key", "sekrit"])
    plain(s)
    check(s.stop() == 0, "SIGTERM drains and exits 0")
    tools()
    print("openai responses client: all checks passed")


if __name__ == "__main__":
    main()
