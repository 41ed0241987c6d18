#!/usr/bin/env python3
"""Structured output (issue 25, ENGINE.md §8 "Constraints") checked with an independent
validator, the Python `jsonschema` package, on the bundled text model (random weights: only
the constraint can make the output valid), thinking off.

Run by .ci/run in the virtual environment of anthropic_client.py (whose server harness it
reuses: loopback, --port 0, bounded waits, a hard timeout):
    python3 tests/serve/structured_output.py target/debug/k3 tests/fixtures/tiny-k3-text

Checks, for a set of schemas (nested objects, arrays with bounds, enums, anyOf, $ref
recursion, bounded numbers and integers, maxLength strings, json_object): every greedy and
sampled reply ends with `stop` within a generous max_tokens (the closing rule) and its text
validates — through `k3 run --json-schema`, chat completions (`response_format`), Responses
(`text.format`) and Messages (`output_config.format`) with the official clients. Tools:
`tool_choice` required and named give a call to a declared (the named) tool whose arguments
validate against its parameters, `none` gives none, `auto` only valid calls; a reply cut by
max_tokens says `length` and reports no call. Bad schemas: 400 naming the keyword in each
API's error shape, and `k3 run` exit 2 naming the file.
"""

import json
import os
import subprocess
import sys
import tempfile

import anthropic
import jsonschema
import openai

import anthropic_client
import k3server
from anthropic_client import Server
from k3server import K3, MODEL, MODEL_DIR, check

GENEROUS = 400
OBJ = {"type": "object", "additionalProperties": False}


def obj(props, required=None):
    return {**OBJ, "properties": props, "required": list(props) if required is None else required}


SCHEMAS = {
    "nested": obj({
        "name": {"type": "string", "maxLength": 12},
        "address": obj({"city": {"type": "string", "maxLength": 10},
                        "zip": {"type": "integer", "minimum": 10000, "maximum": 99999}}),
        "note": {"type": "string", "maxLength": 5},
    }, required=["name", "address"]),
    "array": obj({"tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                           "minItems": 1, "maxItems": 3},
                  "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "null"}],
                           "items": False}}),
    "enum": obj({"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                 "k": {"const": 7}}),
    "anyof": obj({"v": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5},
                                  {"type": "string", "maxLength": 4}, {"type": "null"}]}}),
    "recursion": {"$defs": {"node": obj({
        "value": {"type": "integer", "minimum": 0, "maximum": 9},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}})},
        "$ref": "#/$defs/node"},
    "numbers": obj({"x": {"type": "number", "minimum": -1.5, "maximum": 2.25},
                    "n": {"type": "integer", "minimum": 3, "maximum": 17},
                    "s": {"type": "string", "maxLength": 8}}),
}
ANY_OBJECT = {"type": "object"}
SAMPLINGS = [dict(temperature=0), dict(temperature=1.0, top_p=0.95, seed=7),
             dict(temperature=0.8, seed=123)]
NO_THINK = {"chat_template_kwargs": {"thinking": False}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
     "parameters": obj({"city": {"type": "string", "maxLength": 12},
                        "days": {"type": "integer", "minimum": 1, "maximum": 7}})}},
    {"type": "function", "function": {"name": "set_alarm", "description": "An alarm",
     "parameters": obj({"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                        "label": {"enum": ["work", "gym"]}}, required=["hour"])}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def valid(text, schema, what):
    try:
        v = json.loads(text)
    except json.JSONDecodeError as e:
        check(False, f"{what}: not JSON ({e}): {text!r}")
    try:
        jsonschema.validate(v, schema)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: does not validate ({e.message}): {text!r}")
    check(not outside_strings_has_space(text), f"{what}: no whitespace outside strings: {text!r}")


def outside_strings_has_space(text):
    """True when a whitespace character stands outside a JSON string (the whitespace rule:
    none in a response_format reply)."""
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\r\n":
            return True
    return False


def cli(schema_path, prompt, extra, what):
    r = subprocess.run([K3, "run", MODEL_DIR, "--prompt", prompt, "--json-schema", schema_path,
                        "--gen", str(GENEROUS), "--quiet", "--no-progress", *extra],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{what}: k3 run exits 0 ({r.stderr[-400:]})")
    check(r.stdout.endswith("\n"), f"{what}: the output line is ended")
    return r.stdout[:-1]


def run_cli(tmp):
    for name, schema in SCHEMAS.items():
        path = os.path.join(tmp, f"{name}.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        for extra in ([], ["--temperature", "0.9", "--seed", "5"]):
            out = cli(path, "Give me JSON.", extra, f"k3 run --json-schema {name} {extra}")
            valid(out, schema, f"k3 run {name} {extra}")
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(obj({"a": {"type": "frobnicate"}}), f)
    r = subprocess.run([K3, "run", MODEL_DIR, "--prompt", "x", "--json-schema", bad, "--quiet"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and bad in r.stderr and "type" in r.stderr,
          f"a bad --json-schema is exit 2 naming the file and keyword: {r.stderr.strip()}")


def chat(s):
    c = s.openai
    for name, schema in [*SCHEMAS.items(), ("json_object", ANY_OBJECT)]:
        rf = ({"type": "json_object"} if name == "json_object" else
              {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                      "strict": name != "numbers"}})
        for smp in SAMPLINGS:
            r = c.chat.completions.create(
                model=MODEL, max_tokens=GENEROUS, response_format=rf, extra_body=NO_THINK,
                messages=[{"role": "user", "content": "Answer in JSON."}], **smp)
            ch = r.choices[0]
            check(ch.finish_reason == "stop", f"chat {name} {smp}: stop ({ch.finish_reason})")
            valid(ch.message.content, schema, f"chat {name} {smp}")
    # cut by max_tokens: `length`
    r = c.chat.completions.create(
        model=MODEL, max_tokens=3, extra_body=NO_THINK, messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {"name": "n",
                                                               "schema": SCHEMAS["nested"]}})
    check(r.choices[0].finish_reason == "length", "a constrained reply cut early says length")
    # refusals name the keyword
    for schema, word in [(obj({"a": {"type": "frobnicate"}}), "type"),
                         (obj({"a": {"$ref": "#/$defs/missing"}}), "$ref"),
                         ("not a schema", "schema")]:
        try:
            c.chat.completions.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                response_format={"type": "json_schema", "json_schema": {"name": "b",
                                                                       "schema": schema}})
            check(False, f"a bad schema ({word}) is refused")
        except openai.BadRequestError as e:
            msg = e.body.get("message", "") if isinstance(e.body, dict) else str(e)
            check("response_format" in msg and word in msg,
                  f"chat: 400 naming response_format and `{word}`: {msg}")


def chat_tools(s):
    c = s.openai
    base = dict(model=MODEL, max_tokens=GENEROUS, tools=TOOLS, extra_body=NO_THINK,
                messages=[{"role": "user", "content": "Use a tool."}])
    for smp in SAMPLINGS:
        for choice in ("required", {"type": "function", "function": {"name": "set_alarm"}}):
            r = c.chat.completions.create(tool_choice=choice, **base, **smp)
            ch = r.choices[0]
            calls = ch.message.tool_calls or []
            check(ch.finish_reason == "tool_calls" and calls,
                  f"tool_choice {choice} {smp}: a call ({ch.finish_reason})")
            for call in calls:
                name = call.function.name
                check(name in PARAMS, f"a declared tool ({name})")
                if isinstance(choice, dict):
                    check(name == "set_alarm", "the named tool")
                args = json.loads(call.function.arguments)
                try:
                    jsonschema.validate(args, PARAMS[name])
                except jsonschema.ValidationError as e:
                    check(False, f"{name} arguments validate: {e.message}: {args}")
        for choice in ("none", "auto"):
            r = c.chat.completions.create(tool_choice=choice, **base, **smp)
            ch = r.choices[0]
            check(ch.finish_reason in ("stop", "tool_calls"), f"tool_choice {choice}: ends")
            if choice == "none":
                check(not ch.message.tool_calls, f"tool_choice none {smp}: no call")
            for call in ch.message.tool_calls or []:
                jsonschema.validate(json.loads(call.function.arguments),
                                    PARAMS[call.function.name])
    r = c.chat.completions.create(tool_choice="required", **{**base, "max_tokens": 6})
    ch = r.choices[0]
    check(ch.finish_reason == "length" and not ch.message.tool_calls,
          f"a call cut by max_tokens: length and no call ({ch.finish_reason})")
    try:
        c.chat.completions.create(model=MODEL, max_tokens=5,
                                  messages=[{"role": "user", "content": "x"}],
                                  tools=[{"type": "function", "function": {
                                      "name": "f", "parameters": {"type": "frobnicate"}}}])
        check(False, "a bad tool schema is refused")
    except openai.BadRequestError as e:
        check("tools[0].function.parameters" in str(e), f"400 naming the tool's field: {e}")


def responses(s):
    c = s.openai
    for name, schema in SCHEMAS.items():
        for smp in SAMPLINGS[:2]:
            r = c.responses.create(
                model=MODEL, input="Answer in JSON.", max_output_tokens=GENEROUS,
                reasoning={"effort": "none"},
                text={"format": {"type": "json_schema", "name": name, "schema": schema,
                                 "strict": True}},
                **{k: v for k, v in smp.items() if k != "seed"})
            check(r.status == "completed", f"responses {name} {smp}: completed ({r.status})")
            valid(r.output_text, schema, f"responses {name} {smp}")
    r = c.responses.create(model=MODEL, input="x", max_output_tokens=GENEROUS,
                           reasoning={"effort": "none"}, text={"format": {"type": "json_object"}})
    valid(r.output_text, ANY_OBJECT, "responses json_object")
    flat = [{"type": "function", **t["function"]} for t in TOOLS]
    r = c.responses.create(model=MODEL, input="Use a tool.", max_output_tokens=GENEROUS,
                           reasoning={"effort": "none"}, tools=flat, tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    check(calls, "responses tool_choice required: a function_call")
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), PARAMS[call.name])
    try:
        c.responses.create(model=MODEL, input="x", max_output_tokens=5,
                           text={"format": {"type": "json_schema", "name": "b",
                                            "schema": obj({"a": {"type": "frobnicate"}})}})
        check(False, "responses: a bad schema is refused")
    except openai.BadRequestError as e:
        check("text.format.schema" in str(e), f"responses: 400 naming text.format.schema: {e}")


def messages(s):
    c = s.client
    for name, schema in SCHEMAS.items():
        for smp in SAMPLINGS[:2]:
            # this client has no `temperature` argument: the server's field, as extra_body
            r = c.messages.create(
                model=MODEL, max_tokens=GENEROUS, thinking={"type": "disabled"},
                messages=[{"role": "user", "content": "Answer in JSON."}],
                output_config={"format": {"type": "json_schema", "schema": schema}},
                extra_body={k: v for k, v in smp.items() if k != "seed"})
            check(r.stop_reason == "end_turn", f"messages {name} {smp}: end_turn ({r.stop_reason})")
            text = "".join(b.text for b in r.content if b.type == "text")
            valid(text, schema, f"messages {name} {smp}")
    ant_tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        r = c.messages.create(model=MODEL, max_tokens=GENEROUS, tools=ant_tools,
                              tool_choice=choice, thinking={"type": "disabled"},
                              messages=[{"role": "user", "content": "Use a tool."}])
        uses = [b for b in r.content if b.type == "tool_use"]
        check(r.stop_reason == "tool_use" and uses, f"messages tool_choice {choice}: tool_use")
        for u in uses:
            if choice["type"] == "tool":
                check(u.name == "get_weather", "the named tool")
            jsonschema.validate(u.input, PARAMS[u.name])
    r = c.messages.create(model=MODEL, max_tokens=GENEROUS, tools=ant_tools,
                          tool_choice={"type": "none"}, thinking={"type": "disabled"},
                          messages=[{"role": "user", "content": "Use a tool."}])
    check(not [b for b in r.content if b.type == "tool_use"], "messages tool_choice none: no call")
    try:
        c.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                          output_config={"format": {
                              "type": "json_schema", "schema": obj({"a": {"type": "frobnicate"}})}})
        check(False, "messages: a bad schema is refused")
    except anthropic.BadRequestError as e:
        check("output_config.format.schema" in str(e), f"messages: 400 in Anthropic's shape: {e}")


def main():
    k3server.watchdog(900)
    with tempfile.TemporaryDirectory() as tmp:
        run_cli(tmp)
    s = Server(["--ctx", "2048", "--threads", "1", "--api-key", "sekrit"])
    chat(s)
    chat_tools(s)
    responses(s)
    messages(s)
    check(s.stop() == 0, "SIGTERM drains and exits 0")
    print("structured output: all checks passed")


if __name__ == "__main__":
    main()
