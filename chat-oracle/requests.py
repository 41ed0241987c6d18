#!/usr/bin/env python3
"""Writes tests/fixtures/chat/requests.json: the conversations the oracle renders.

Each case: name, request (an array of messages or a request body), optional
generation_prompt (default true), optional k3_refuses (the field k3's error names, for
cases k3 refuses; the oracle may accept them, see README.md)."""
import json, os

U = lambda c, **kw: dict(role="user", content=c, **kw)
S = lambda c, **kw: dict(role="system", content=c, **kw)
A = lambda c, **kw: dict(role="assistant", content=c, **kw)
T = lambda c, **kw: dict(role="tool", content=c, **kw)

def tool(name, desc, params):
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}

WEATHER = tool("get_weather", "Get the current weather for a city.", {
    "type": "object", "required": ["city"],
    "properties": {"unit": {"type": "string", "enum": ["c", "f"]}, "city": {"type": "string", "description": "City name"}}})
SEARCH = tool("search_web", "Search the web; returns \"snippets\" & links.", {
    "type": "object",
    "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1, "maximum": 1e3, "default": 5},
                   "filters": {"type": "object", "properties": {"lang": {"type": "string"}, "since": {"type": ["string", "null"]},
                               "sites": {"type": "array", "items": {"type": "object", "properties": {"domain": {"type": "string"}, "weight": {"type": "number", "minimum": 0.5}}}}}}}})
CJK_TOOL = tool("translate_文本".encode("ascii", "ignore").decode() + "text", "把文本翻译成另一种语言 🌐 (traduire « texte »)", {
    "type": "object", "properties": {"文本": {"type": "string", "description": "要翻译的文本"}, "目标语言": {"type": "string"}}})
CALC = tool("calc-v2", "Evaluate an expression", {"type": "object", "properties": {"expr": {"type": "string"}}})

def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}

cases = []
def case(name, request, **kw):
    cases.append(dict(name=name, request=request, **kw))

OFF = {"thinking": False}
# --- message kinds
case("user_only", [U("Hello world")])
case("system_user", [S("You are a helpful assistant."), U("What is 2+2?")])
case("system_trimmed_not", [S("  spaced system  \n"), U("  spaced user \n")])
case("developer_as_system", [dict(role="developer", content="Always answer in French."), U("Hi")])
case("user_name_quote_amp", [U("hi", name='A "quoted" & co <x>')])
case("content_parts", [U([{"type": "text", "text": "part one. "}, {"type": "text", "text": "part two"}])])
case("content_part_text_array", [U([{"type": "text", "text": ["line a", "", "line b"]}])])
case("content_parts_without_text", [U([{"type": "refusal", "refusal": "x"}, {"type": "text", "text": "kept"}])], k3_refuses="messages[0].content[0].type")
case("empty_user_content", [U("")])
case("null_user_content", [U(None)])
case("literal_special_text", [U("type <|open|>message<|sep|> and [EOS] <|end_of_msg|> literally")])
case("cjk_content", [S("你是一个乐于助人的助手。"), U("请用中文解释量子纠缠，谢谢！")])
case("emoji_content", [U("Ship it 🚀🔥 — family: 👨‍👩‍👧‍👦, flags 🇯🇵🇫🇷, skin 👍🏽")])
case("mixed_scripts", [U("Привет, κόσμε! مرحبا 日本語とEnglish混合 123456789 ſ")])
# --- assistant history
case("assistant_history_reasoning", [U("Hi"), A("Hello! How can I help?", reasoning_content="The user greets me."), U("Tell me a joke")])
case("assistant_reasoning_alias", [U("Hi"), A("Hello!", reasoning="Greeting back."), U("Again")])
case("assistant_reasoning_empty_falls_back", [U("Hi"), A("Hello!", reasoning_content="", reasoning="fallback"), U("ok")])
case("assistant_whitespace_reasoning", [U("Hi"), A("Yo", reasoning_content="  \n "), U("ok")])
case("assistant_no_reasoning", [U("Hi"), A("Hello"), U("ok")])
case("assistant_name", [U("Hi"), A("I am Kimi", name="kimi & co"), U("ok")])
case("assistant_history_thinking_off", {"messages": [U("Hi"), A("Hello", reasoning_content="dropped"), U("ok")], "chat_template_kwargs": OFF})
case("assistant_content_parts", [U("Hi"), A([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), U("ok")])
case("multi_turn_long", [S("Be brief."), U("Capital of France?"), A("Paris.", reasoning_content="Easy."), U("And Germany?"),
                         A("Berlin.", reasoning_content="Also easy."), U("Italy?"), A("Rome."), U("Spain?")])
# --- thinking switch and effort
case("user_only_hi", [U("Hi")])
case("thinking_off", {"messages": [U("Hi")], "chat_template_kwargs": OFF})
case("enable_thinking_false", {"messages": [U("Hi")], "chat_template_kwargs": {"enable_thinking": False}})
case("effort_low", {"messages": [U("Hi")], "chat_template_kwargs": {"thinking_effort": "low"}})
case("effort_high", {"messages": [U("Hi")], "chat_template_kwargs": {"thinking_effort": "high"}})
case("effort_max", {"messages": [U("Hi")], "chat_template_kwargs": {"thinking": True, "thinking_effort": "max"}})
case("effort_top_level", {"messages": [U("Hi")], "reasoning_effort": "low"})
case("effort_kwargs_reasoning_effort", {"messages": [U("Hi")], "chat_template_kwargs": {"reasoning_effort": "high"}})
case("effort_precedence_thinking_effort_wins", {"messages": [U("Hi")], "reasoning_effort": "high", "chat_template_kwargs": {"thinking_effort": "low"}})
case("effort_precedence_top_over_kwargs", {"messages": [U("Hi")], "reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"}})
case("effort_medium_ignored_when_off", {"messages": [U("Hi")], "chat_template_kwargs": {"thinking": False, "thinking_effort": "medium"}})
case("other_keys_ignored", {"model": "kimi-k3", "temperature": 0.6, "stream": True, "messages": [U("Hi")], "max_tokens": 10})
# --- tools
case("tools_basic", {"messages": [U("Weather in Paris?")], "tools": [WEATHER]})
case("tools_nested_sorted", {"messages": [U("Find rust news")], "tools": [SEARCH, WEATHER]})
case("tools_non_ascii", {"messages": [U("翻译：你好")], "tools": [CJK_TOOL, CALC]})
case("tool_choice_auto", {"messages": [U("Weather?")], "tools": [WEATHER], "tool_choice": "auto"})
case("tool_choice_none", {"messages": [U("Weather?")], "tools": [WEATHER], "tool_choice": "none"})
case("tool_choice_required", {"messages": [U("Weather?")], "tools": [WEATHER, CALC], "tool_choice": "required"})
case("tool_choice_named", {"messages": [U("Weather?")], "tools": [WEATHER, CALC], "tool_choice": {"type": "function", "function": {"name": "calc-v2"}}})
case("tool_choice_null", {"messages": [U("Weather?")], "tools": [WEATHER], "tool_choice": None})
case("tools_empty_array", {"messages": [U("Hi")], "tools": []})
EVERY = {"s": "Paris \"centre\" & <b>\n\ttab", "i": 42, "neg": -7, "f": 3.25, "small": 0.1, "exp": 1e20, "tiny": 1.5e-7,
         "negzero": -0.0, "big": 12345678901234567890, "t": True, "fa": False, "n": None,
         "obj": {"z": 1, "a": [1, 2.5, "x"], "nested": {"k": None}}, "arr": [True, None, "é", {"b": 2, "a": 1}], "empty_o": {}, "empty_a": [],
         "uni": "日本 🚀", "ctl": "a\u0001b\u001fc\u007f"}
def args_text(obj):  # the wire form: a JSON string
    return json.dumps(obj, ensure_ascii=False)
RAW_EVERY = '{"s": "Paris \\"centre\\" & <b>\\n\\ttab", "i": 42, "neg": -7, "f": 3.25, "small": 0.1, "exp": 1e20, "tiny": 1.5e-7, "negzero": -0, "negzerof": -0.0, "big": 12345678901234567890, "huge": 123456789012345678901234567890, "t": true, "fa": false, "n": null, "obj": {"z": 1, "a": [1, 2.5, "x"], "nested": {"k": null}}, "arr": [true, null, "\\u00e9", {"b": 2, "a": 1}], "empty_o": {}, "empty_a": [], "uni": "日本 🚀", "ctl": "a\\u0001b\\u001fc\\u007f", "E": 2E-3, "one": 1.0, "hundred": 1e2, "i17": 1e17, "i16": 1e16, "i15": 1e15, "small5": 0.00001, "small4": 0.0001}'
def loop(args, **kw):
    return {"messages": [U("Do it"), A(None, reasoning_content="Call the tool.", tool_calls=[call("c1", "get_weather", args)]),
                         T("{\"temp\": 21}", tool_call_id="c1")], "tools": [WEATHER], **kw}
case("args_every_type_string", loop(RAW_EVERY))
case("args_every_type_object", loop(EVERY))
case("args_raw_string", loop("city=Paris; unit=c"))
case("args_blank_string", loop("   "))
case("args_empty_object_string", loop("{}"))
case("args_null", loop(None))
case("args_cjk_keys", loop('{"文本": "你好，世界", "目标语言": "français", "emoji": "👋🏽"}'))
case("args_key_quote_amp", loop('{"a\\"b&c": "v&\\"w"}'))
case("args_thinking_off", loop('{"city": "Paris"}', chat_template_kwargs=OFF))
case("tool_loop_final_answer", {"messages": [U("Weather in Paris and Rome?"),
    A("Let me check.", reasoning_content="Two calls.", tool_calls=[call("a", "get_weather", '{"city": "Paris"}'), call("b", "get_weather", '{"city": "Rome", "unit": "c"}')]),
    T("18C", tool_call_id="a"), T("24C", tool_call_id="b"),
    A("Paris 18C, Rome 24C.", reasoning_content="Report."), U("Thanks! Now London?")], "tools": [WEATHER]})
case("tool_results_reordered_by_id", {"messages": [U("Both"),
    A("", tool_calls=[call("x1", "get_weather", '{"city": "A"}'), call("x2", "calc-v2", '{"expr": "1+1"}'), call("x3", "get_weather", '{"city": "B"}')]),
    T("r3", tool_call_id="x3"), T("r1", tool_call_id="x1"), T("r2", tool_call_id="x2")], "tools": [WEATHER, CALC]})
case("tool_results_subset_reordered", {"messages": [U("Three"),
    A("", tool_calls=[call("x1", "get_weather", '{"city": "A"}'), call("x2", "calc-v2", '{"expr": "1"}'), call("x3", "get_weather", '{"city": "B"}')]),
    T("r3", tool_call_id="x3"), T("r1", tool_call_id="x1")], "tools": [WEATHER, CALC]})
case("tool_results_unresolved_arrival_order", {"messages": [U("Both"),
    A("", tool_calls=[call("x1", "get_weather", '{"city": "A"}'), call("x2", "calc-v2", '{"expr": "1+1"}')]),
    T("r2", tool_call_id="nope"), T("r1", tool_call_id="x1")], "tools": [WEATHER, CALC]})
case("tool_results_no_ids_positional", {"messages": [U("Both"),
    A("", tool_calls=[{"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}, {"type": "function", "function": {"name": "calc-v2", "arguments": "{}"}}]),
    T("r1"), T("r2")], "tools": [WEATHER, CALC]})
case("tool_result_explicit_name", {"messages": [U("x"), A("", tool_calls=[call("c", "get_weather", "{}")]), T("r", name="get_weather_alias")], "tools": [WEATHER]})
case("tool_result_name_replaced_by_call", {"messages": [U("x"), A("", tool_calls=[call("c", "get_weather", "{}")]), T("r", tool_call_id="c", name="wrong")], "tools": [WEATHER]})
case("tool_result_tool_key_without_call", [U("x"), T("orphan result", tool="calc-v2")])
case("tool_result_content_parts", {"messages": [U("x"), A("", tool_calls=[call("c", "get_weather", "{}")]), T([{"type": "text", "text": "part1"}, {"type": "text", "text": "part2"}], tool_call_id="c")], "tools": [WEATHER]})
case("tool_call_bare_shape", {"messages": [U("x"), A("", tool_calls=[{"id": "c", "name": "get_weather", "arguments": {"city": "Oslo"}}]), T("r", tool_call_id="c")], "tools": [WEATHER]})
case("tool_loop_two_rounds", {"messages": [U("Plan"),
    A("", reasoning_content="step 1", tool_calls=[call("1", "search_web", '{"query": "k3", "top_k": 3, "filters": {"lang": "en", "since": null}}')]), T("results…", tool_call_id="1"),
    A("", reasoning_content="step 2", tool_calls=[call("2", "calc-v2", '{"expr": "6*7"}')]), T("42", tool_call_id="2"),
    A("Done: 42")], "tools": [SEARCH, CALC], "tool_choice": "auto"})
case("tool_loop_pending_result", {"messages": [U("go"), A("", tool_calls=[call("1", "calc-v2", '{"expr": "2**10"}')]), T("1024", tool_call_id="1")], "tools": [CALC], "tool_choice": "required"})
# --- dynamic tools
case("dynamic_tools_system", {"messages": [S("You are terse."), dict(role="system", content="", tools=[CALC]), U("2+2?")], "tools": [WEATHER]})
case("dynamic_tools_no_content", [dict(role="system", tools=[SEARCH]), U("search")])
case("dynamic_tools_developer_with_content", [dict(role="developer", content="Use tools wisely.", tools=[CALC]), U("2+2?")])
case("dynamic_tools_empty_is_ordinary", [dict(role="system", content="plain", tools=[]), U("hi")])
case("dynamic_tools_named_choice", {"messages": [dict(role="system", tools=[CALC]), U("2+2?")], "tool_choice": {"type": "function", "function": {"name": "calc-v2"}}})
# --- response_format
case("response_format_json_object", {"messages": [U("Give JSON")], "response_format": {"type": "json_object"}})
SCHEMA = {"type": "object", "required": ["name", "age"], "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False}
case("response_format_json_schema", {"messages": [U("Person")], "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}}})
case("response_format_json_schema_bare", {"messages": [U("Person")], "response_format": {"type": "json_schema", "json_schema": {"type": "object", "properties": {"b": {}, "a": {"const": "ü\"&"}}}}})
case("response_format_text", {"messages": [U("Plain")], "response_format": {"type": "text"}})
case("response_format_with_tool_choice", {"messages": [U("x")], "tools": [CALC], "tool_choice": "none", "response_format": {"type": "json_object"}, "chat_template_kwargs": OFF})
# --- partial and generation prompt
case("partial_thinking", [U("Write a haiku"), A("Autumn moon", reasoning_content="5-7-5.", partial=True)])
case("partial_thinking_no_reasoning", [U("Write a haiku"), A("Autumn", partial=True)])
case("partial_thinking_off", {"messages": [U("Count"), A("1, 2,", partial=True)], "chat_template_kwargs": OFF})
case("partial_name", [U("Hi"), A("Kimi here:", name="kimi", partial=True)])
case("partial_after_internal", {"messages": [U("JSON please"), A("{\"a\":", partial=True)], "tools": [CALC], "tool_choice": "required", "response_format": {"type": "json_object"}})
case("partial_ignores_generation_prompt", [U("Hi"), A("Sure", partial=True)], generation_prompt=False)
case("partial_false_ordinary", [U("Hi"), A("Done", partial=False)])
case("partial_null_ordinary", [U("Hi"), A("Done", partial=None), U("ok")])
case("partial_cjk_emoji", [U("说个笑话"), A("好的😄，", reasoning_content="讲个笑话", partial=True)])
case("no_generation_prompt", [S("sys"), U("Hi")], generation_prompt=False)
case("no_generation_prompt_thinking_off", {"messages": [U("Hi"), A("Hello")], "chat_template_kwargs": OFF}, generation_prompt=False)
# --- refusals (k3_refuses: the field named in k3's error)
case("refuse_unknown_role", [U("x"), dict(role="narrator", content="y")], k3_refuses="messages[1].role")
case("refuse_missing_role", [dict(content="y")], k3_refuses="messages[0].role")
case("refuse_call_without_name", {"messages": [U("x"), A("", tool_calls=[{"id": "c", "type": "function", "function": {"arguments": "{}"}}])]}, k3_refuses="messages[1].tool_calls[0].function.name")
case("refuse_tool_declared_twice", {"messages": [U("x")], "tools": [WEATHER, WEATHER]}, k3_refuses="tools[1].function.name")
case("refuse_tool_declared_twice_dynamic", {"messages": [dict(role="system", tools=[CALC]), U("x")], "tools": [CALC]}, k3_refuses="messages[0].tools[0].function.name")
case("refuse_effort_medium", {"messages": [U("x")], "chat_template_kwargs": {"thinking_effort": "medium"}}, k3_refuses="chat_template_kwargs.thinking_effort")
case("refuse_effort_top_level_medium", {"messages": [U("x")], "reasoning_effort": "medium"}, k3_refuses="reasoning_effort")
case("refuse_partial_not_final", [U("x"), A("y", partial=True), U("z")], k3_refuses="messages[1].partial")
case("refuse_partial_on_user", [U("x", partial=True)], k3_refuses="messages[0].partial")
case("refuse_partial_not_bool", [U("x"), A("y", partial="yes")], k3_refuses="messages[1].partial")
case("refuse_partial_with_tool_calls", [U("x"), A("y", partial=True, tool_calls=[call("c", "calc-v2", "{}")])], k3_refuses="messages[1].partial")
case("refuse_bad_tool_name", {"messages": [U("x")], "tools": [tool("bad name!", "d", {"type": "object"})]}, k3_refuses="tools[0].function.name")
case("refuse_tool_name_digit_start", {"messages": [U("x")], "tools": [tool("9lives", "d", {"type": "object"})]}, k3_refuses="tools[0].function.name")
case("refuse_tool_name_too_long", {"messages": [U("x")], "tools": [tool("a" * 257, "d", {"type": "object"})]}, k3_refuses="tools[0].function.name")
case("refuse_tools_on_user", [dict(role="user", content="x", tools=[CALC])], k3_refuses="messages[0].tools")
case("refuse_system_content_and_tools", [dict(role="system", content="x", tools=[CALC]), U("y")], k3_refuses="messages[0].tools")
case("refuse_system_without_content", [dict(role="system"), U("y")], k3_refuses="messages[0].content")
case("refuse_named_choice_undeclared", {"messages": [U("x")], "tools": [CALC], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, k3_refuses="tool_choice.function.name")
case("refuse_tool_choice_bad_type", {"messages": [U("x")], "tools": [CALC], "tool_choice": {"type": "tool", "name": "calc-v2"}}, k3_refuses="tool_choice.type")
case("refuse_tool_choice_unknown_string", {"messages": [U("x")], "tools": [CALC], "tool_choice": "sometimes"}, k3_refuses="tool_choice")
case("refuse_response_format_unknown", {"messages": [U("x")], "response_format": {"type": "yaml"}}, k3_refuses="response_format.type")
case("refuse_tools_not_array", {"messages": [U("x")], "tools": {"name": "calc"}}, k3_refuses="tools")
case("refuse_tool_result_without_name", [U("x"), T("r")], k3_refuses="messages[1].tool")
case("refuse_args_array", {"messages": [U("x"), A("", tool_calls=[call("c", "calc-v2", "[1, 2]")])]}, k3_refuses="messages[1].tool_calls[0].function.arguments")
case("refuse_args_number", {"messages": [U("x"), A("", tool_calls=[call("c", "calc-v2", 5)])]}, k3_refuses="messages[1].tool_calls[0].function.arguments")
case("refuse_image_part", [U([{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}])], k3_refuses="messages[0].content[1].type")
case("refuse_effort_wrong_type", {"messages": [U("x")], "chat_template_kwargs": {"thinking_effort": 3}}, k3_refuses="chat_template_kwargs.thinking_effort")
case("refuse_thinking_wrong_type", {"messages": [U("x")], "chat_template_kwargs": {"thinking": "no"}}, k3_refuses="chat_template_kwargs.thinking")

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat", "requests.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(out, len(cases), "cases")
