#!/usr/bin/env python3
"""make-conversations.py - write the chat corpus tests/data/jinja/conv/*.json.

Each file is one set of template variables (messages, add_generation_prompt,
tools, enable_thinking, ...). Rerun after editing; the expected outputs are
then regenerated with tests/jinja/make-fixtures.sh.
"""
import json, os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "jinja", "conv")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web and return the top results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
        "required": ["query"]}}}
SYS = "You are a helpful assistant."

def call(id_, name, args, as_string=False):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}

C = {}
C["01-system-user"] = {"messages": [{"role": "system", "content": SYS}, {"role": "user", "content": "Hello! Who are you?"}], "add_generation_prompt": True}
C["02-user-gen"] = {"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True}
C["03-user-nogen"] = {"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": False}
C["04-multiturn"] = {"messages": [
    {"role": "system", "content": SYS}, {"role": "user", "content": "Name a prime number."},
    {"role": "assistant", "content": "7 is a prime number."}, {"role": "user", "content": "And an even one?"}],
    "add_generation_prompt": True}
C["05-multiturn-end-assistant"] = {"messages": [
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the chicken cross the road? To get to the other side."}],
    "add_generation_prompt": False}
C["06-unicode"] = {"messages": [
    {"role": "system", "content": "Réponds en français. 日本語も大丈夫です。"},
    {"role": "user", "content": "Ça va? 🙂 Привет, мир! ñandú — “quotes” … 中文"},
    {"role": "assistant", "content": "Très bien, merci ! 😀 Ελληνικά"}, {"role": "user", "content": "Encore 🚀\u00a0fin"}],
    "add_generation_prompt": True}
C["07-whitespace"] = {"messages": [
    {"role": "system", "content": "  Be brief.\n\n"}, {"role": "user", "content": "\n  Line one\n\tLine two  \n"},
    {"role": "assistant", "content": "  Answer with spaces  \n"}, {"role": "user", "content": "ok  "}],
    "add_generation_prompt": True}
C["08-tools-defined"] = {"messages": [{"role": "system", "content": SYS}, {"role": "user", "content": "What's the weather in Paris?"}],
    "tools": [WEATHER, SEARCH], "add_generation_prompt": True}
C["09-tool-call-result"] = {"messages": [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"}],
    "tools": [WEATHER], "add_generation_prompt": True}
C["10-tool-call-string-args"] = {"messages": [
    {"role": "system", "content": SYS}, {"role": "user", "content": "Search for llama recipes."},
    {"role": "assistant", "content": "", "tool_calls": [call("call_a", "web_search", {"query": "llama recipes", "max_results": 3}, True)]},
    {"role": "tool", "tool_call_id": "call_a", "name": "web_search", "content": "1. Llama stew\n2. Grilled llama"},
    {"role": "assistant", "content": "I found two recipes: llama stew and grilled llama."}],
    "tools": [SEARCH], "add_generation_prompt": False}
C["11-parallel-tool-calls"] = {"messages": [
    {"role": "user", "content": "Weather in Paris and Tokyo?"},
    {"role": "assistant", "content": "", "tool_calls": [call("c1", "get_weather", {"city": "Paris"}), call("c2", "get_weather", {"city": "Tokyo"})]},
    {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"},
    {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "25C"}],
    "tools": [WEATHER, SEARCH], "add_generation_prompt": True}
C["12-thinking-off"] = {"messages": [{"role": "user", "content": "Quick: capital of Italy?"}], "add_generation_prompt": True, "enable_thinking": False}
C["13-thinking-on"] = {"messages": [{"role": "user", "content": "Prove that sqrt(2) is irrational."}], "add_generation_prompt": True, "enable_thinking": True}
C["14-reasoning-content"] = {"messages": [
    {"role": "user", "content": "What is 17*3?"},
    {"role": "assistant", "content": "51", "reasoning_content": "17*3 = 51."},
    {"role": "user", "content": "And 17*4?"}], "add_generation_prompt": True}
C["15-think-in-content"] = {"messages": [
    {"role": "user", "content": "Pick a color."},
    {"role": "assistant", "content": "<think>\nThe user wants any color.\n</think>\n\nBlue."},
    {"role": "user", "content": "Another?"}], "add_generation_prompt": True}
C["16-system-only"] = {"messages": [{"role": "system", "content": SYS}], "add_generation_prompt": True}
C["17-long"] = {"messages": [{"role": "system", "content": SYS}] + [m for i in range(6) for m in (
    {"role": "user", "content": "Question %d: what is %d squared?" % (i, i)},
    {"role": "assistant", "content": "%d squared is %d." % (i, i * i)})] + [{"role": "user", "content": "Thanks!"}],
    "add_generation_prompt": True}
C["18-tool-call-null-content"] = {"messages": [
    {"role": "system", "content": SYS}, {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_9", "get_weather", {"city": "Oslo", "unit": "fahrenheit"})]},
    {"role": "tool", "tool_call_id": "call_9", "content": "41F, rain"},
    {"role": "assistant", "content": "It is 41F and raining in Oslo."}, {"role": "user", "content": "Thanks."}],
    "tools": [WEATHER], "add_generation_prompt": True}
C["19-empty-content"] = {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": "?"}], "add_generation_prompt": True}
C["20-special-chars"] = {"messages": [
    {"role": "user", "content": "Template-like text: {{ x }} {% if %} {# c #} <|im_start|> </s> \"quoted\" \\ back\\slash 'single'"},
    {"role": "assistant", "content": "Tabs\tand\r\ncarriage returns; 100% sure; a|b; [x] {y}"}, {"role": "user", "content": "end"}],
    "add_generation_prompt": True}
C["21-tool-flow-final"] = {"messages": [
    {"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Find the weather in Rome, then summarise."},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [call("r1", "get_weather", {"city": "Rome"})]},
    {"role": "tool", "tool_call_id": "r1", "name": "get_weather", "content": "{\"temperature\": 22}"},
    {"role": "assistant", "content": "Rome is 22C."}], "tools": [WEATHER], "add_generation_prompt": False}
C["22-content-parts"] = {"messages": [
    {"role": "user", "content": [{"type": "text", "text": "Describe this in one word: "}, {"type": "text", "text": "sunrise"}]}],
    "add_generation_prompt": True}
C["23-thinking-multiturn"] = {"messages": [
    {"role": "system", "content": SYS}, {"role": "user", "content": "2+3?"},
    {"role": "assistant", "content": "5", "reasoning_content": "Add them."}, {"role": "user", "content": "times 4?"}],
    "add_generation_prompt": True, "enable_thinking": True}
C["24-tools-no-system-nogen"] = {"messages": [{"role": "user", "content": "Search cats"}],
    "tools": [SEARCH], "add_generation_prompt": False}
C["25-tool-call-short-ids"] = {"messages": [  # Mistral's templates want 9-character alphanumeric ids
    {"role": "system", "content": SYS}, {"role": "user", "content": "Weather in Lima and news about it?"},
    {"role": "assistant", "content": "", "tool_calls": [call("a1b2c3d4e", "get_weather", {"city": "Lima"})]},
    {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "19C, cloudy"},
    {"role": "assistant", "content": "It is 19C and cloudy in Lima."}, {"role": "user", "content": "Thanks"}],
    "tools": [WEATHER, SEARCH], "add_generation_prompt": True}
C["26-reasoning-effort-developer"] = {"messages": [  # gpt-oss: reasoning_effort, developer role
    {"role": "developer", "content": "Answer in haiku."}, {"role": "user", "content": "Describe the sea."},
    {"role": "assistant", "content": "Waves fold into foam", "thinking": "A haiku about the sea."},
    {"role": "user", "content": "Now the sky."}], "reasoning_effort": "high", "tools": [WEATHER], "add_generation_prompt": True}
C["27-builtin-tools-date"] = {"messages": [  # Llama 3.1: builtin tools and a date string
    {"role": "system", "content": "Use tools when useful."}, {"role": "user", "content": "Search the news about LLMs."}],
    "builtin_tools": ["brave_search", "wolfram_alpha"], "date_string": "26 Jul 2024", "tools": [SEARCH],
    "add_generation_prompt": True}
C["28-documents"] = {"messages": [  # RAG templates: documents
    {"role": "user", "content": "When was the bridge built?"}],
    "documents": [{"title": "Bridge", "text": "The bridge was built in 1932."},
                  {"title": "Town", "text": "The town has 3,000 people."}], "add_generation_prompt": True}
C["29-nested-tool-args"] = {"messages": [
    {"role": "user", "content": "Book it."},
    {"role": "assistant", "content": "", "tool_calls": [call("b7c8d9e0f", "book", {
        "who": {"name": "Zoë", "age": 31, "tags": ["vip", "früh"]}, "nights": 2, "price": 99.5, "ok": True, "note": None})]},
    {"role": "tool", "tool_call_id": "b7c8d9e0f", "content": "{\"status\": \"confirmed\", \"id\": 42}"},
    {"role": "assistant", "content": "Booked: confirmation 42."}],
    "tools": [{"type": "function", "function": {"name": "book", "description": "Book a room.",
               "parameters": {"type": "object", "properties": {"who": {"type": "object"}, "nights": {"type": "integer"}}}}}],
    "add_generation_prompt": False}

os.makedirs(OUT, exist_ok=True)
for name, v in C.items():
    v = dict(v)
    v.setdefault("bos_token", "<s>")
    v.setdefault("eos_token", "</s>")
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(v, f, ensure_ascii=False, indent=1)
        f.write("\n")
print(len(C), "conversations")
