"""A vLLM tool parser (`--tool-parser-plugin <this file> --tool-call-parser fenced_json`) for models
that write each call as a fenced JSON object, as Qwen2.5-Coder-1.5B does whatever its template asks:

    ```json
    {"name": "bash", "arguments": {"command": "ls"}}
    ```

Loaded by the real vLLM inside its own process (this file imports vllm: our venv never imports it).
vLLM 0.32's parsers miss this format: `hermes` wants <tool_call> tags (no call parsed), `xlam` wants
a JSON array (nothing parsed whole; streamed, the fence and `{"name": ..., "arguments` leak as
content before the call). This one parses the object (or a bare one, or several) whole and
streamed. Streamed, text that may still become a call (a partial fence, an object not yet closed)
is held back, and each call goes out in one delta once its object parses; nothing of the call's
syntax is ever sent as content. A fenced block that is not a call (```python ...) is content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager

FENCE = "```"
OPEN = re.compile(r"```(?:json)?[ \t]*\n?\s*")
_DECODER = json.JSONDecoder()


def _call(obj: object) -> tuple[str, str] | None:
    """(name, arguments as a JSON string) when obj is a call; None otherwise."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters"))
    if args is None:
        return None
    return obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _partial_fence(tail: str) -> int:
    """Length of the longest end of `tail` that may begin a fence (```, ```json)."""
    for n in range(min(len(tail), len("```json")), 0, -1):
        if "```json".startswith(tail[-n:]):
            return n
    return 0


def scan(text: str, final: bool) -> tuple[str, list[tuple[str, str]], bool]:
    """Split model text into (content, calls, held): `held` when the end of the text may still
    become (part of) a call. With `final`, nothing is held: what did not become a call is content."""
    content: list[str] = []
    calls: list[tuple[str, str]] = []
    i = 0
    n = len(text)
    while i < n:
        if i == 0 and text.lstrip().startswith("{"):  # a bare object as the whole answer
            bare = text.index("{")
            try:
                obj, end = _DECODER.raw_decode(text, bare)
            except ValueError:
                if final:
                    return text, calls, False
                return text[:bare], calls, True  # the object is not closed yet
            if (call := _call(obj)) is not None:
                content.append(text[:bare])
                calls.append(call)
                i = end
                continue
        j = text.find(FENCE, i)
        if j < 0:
            tail = text[i:]
            hold = 0 if final else _partial_fence(tail)
            content.append(tail[:len(tail) - hold])
            return "".join(content), calls, hold > 0
        content.append(text[i:j])
        m = OPEN.match(text, j)
        after = m.end()
        if after >= n or (text[after] != "{" and "```json".startswith(text[j:].rstrip())):
            if final:
                content.append(text[j:])
                return "".join(content), calls, False
            return "".join(content), calls, True  # the fence is still opening
        if text[after] != "{":  # a code block, not a call: content up to its closing fence
            close = text.find(FENCE, after)
            stop = n if close < 0 else close + len(FENCE)
            content.append(text[j:stop])
            i = stop
            continue
        try:
            obj, end = _DECODER.raw_decode(text, after)
        except ValueError:
            if final:
                content.append(text[j:])
                return "".join(content), calls, False
            return "".join(content), calls, True  # the object is not closed yet
        call = _call(obj)
        if call is None:
            content.append(text[j:end])
            i = end
            continue
        calls.append(call)
        k = end
        while k < n and text[k].isspace():
            k += 1
        if text.startswith(FENCE, k):
            k += len(FENCE)
        elif k < n and FENCE.startswith(text[k:]) and not final:
            return "".join(content), calls, True  # the closing fence is still arriving
        i = k
    return "".join(content), calls, False


class FencedJsonToolParser(ToolParser):
    def __init__(self, tokenizer, tools=None):
        super().__init__(tokenizer, tools)
        self._sent_content = 0
        self._sent_calls = 0

    def extract_tool_calls(self, model_output: str, request) -> ExtractedToolCallInformation:
        content, calls, _ = scan(model_output, final=True)
        if not calls:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)
        return ExtractedToolCallInformation(
            tools_called=True,
            tool_calls=[ToolCall(id=make_tool_call_id(), type="function",
                                 function=FunctionCall(name=name, arguments=args)) for name, args in calls],
            content=content.strip() or None,
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request,
    ) -> DeltaMessage | None:
        content, calls, _ = scan(current_text, final=False)
        new_content = content[self._sent_content:]
        # Content around calls is only whitespace the fences leave: keep it out once a call went.
        if calls and not new_content.strip():
            new_content = ""
        self._sent_content = len(content)
        deltas = []
        for index in range(self._sent_calls, len(calls)):
            name, args = calls[index]
            deltas.append(DeltaToolCall(index=index, type="function", id=make_tool_call_id(),
                                        function=DeltaFunctionCall(name=name, arguments=args).model_dump(
                                            exclude_none=True)))
            self.prev_tool_call_arr.append({"name": name, "arguments": args})
            self.streamed_args_for_tool.append(args)
            self.current_tool_id = index
            self.current_tool_name_sent = True
        self._sent_calls = len(calls)
        if not new_content and not deltas:
            return None
        return DeltaMessage(content=new_content or None, tool_calls=deltas)


ToolParserManager.register_module(name="fenced_json", module=FencedJsonToolParser)
