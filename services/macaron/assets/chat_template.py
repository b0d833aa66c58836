"""The tiny model's chat template: ChatML turns with Hermes-style tool calls (Qwen2.5's layout).

Why this layout: it is what Qwen2-family checkpoints expect, so the specialists' prompt
building and tool-call parsing are exercised on the tiny model exactly as on a real
checkpoint. What it renders:

- `system`, `user`, `assistant` turns as `<|im_start|>ROLE\\n...<|im_end|>\\n`;
- a `tools` list as a `# Tools` section of the system turn, one JSON object per line
  inside `<tools></tools>`;
- an assistant's `tool_calls` as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`
  (arguments given as a dict or as a JSON string, as OpenAI clients send them);
- `tool` results inside a `user` turn, each in `<tool_response>...</tool_response>`, with
  consecutive results sharing one turn;
- content given as a string or as a list of OpenAI text parts;
- `add_generation_prompt` as an open `<|im_start|>assistant\\n` turn.
"""

from __future__ import annotations

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE_START = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"

CHAT_TEMPLATE = r"""
{%- macro text_of(content) -%}
  {%- if content is none -%}
  {%- elif content is string -%}{{ content }}
  {%- elif content is mapping -%}{{ content.text if content.text is defined else '' }}
  {%- elif content is iterable -%}
    {%- for part in content -%}
      {%- if part is string -%}{{ part }}
      {%- elif part is mapping and part.type == 'text' -%}{{ part.text }}
      {%- endif -%}
    {%- endfor -%}
  {%- else -%}{{ content }}
  {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if has_system -%}{{- text_of(messages[0].content) + '\n\n' -}}{%- endif -%}
  {{- '# Tools\n\nYou can call the functions below to help with the request.\n\n' -}}
  {{- 'Their signatures are inside <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
  {{- '\n</tools>\n\nTo call a function, reply with a JSON object holding its name and arguments ' -}}
  {{- 'inside <tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
  {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
  {{- '<|im_start|>system\n' + text_of(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if loop.first and has_system -%}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + text_of(message.content) + '\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- elif message.role == 'assistant' and message.tool_calls -%}
    {{- '<|im_start|>assistant' -}}
    {%- set text = text_of(message.content) -%}
    {%- if text -%}{{- '\n' + text -}}{%- endif -%}
    {%- for call in message.tool_calls -%}
      {%- set fn = call.function if call.function is defined else call -%}
      {{- '\n<tool_call>\n{"name": ' + (fn.name | tojson) + ', "arguments": ' -}}
      {%- if fn.arguments is string -%}{{- fn.arguments -}}
      {%- elif fn.arguments is defined and fn.arguments is not none -%}{{- fn.arguments | tojson -}}
      {%- else -%}{{- '{}' -}}
      {%- endif -%}
      {{- '}\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\n' + text_of(message.content) + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip()


def chat_template_with_default_system(default_system: str) -> str:
    """CHAT_TEMPLATE, plus a system turn holding `default_system` when the caller sends none.

    Why: instruct checkpoints such as SmolLM2 were tuned with a default system turn that their
    own template inserts; dropping it changes their answers. Tools and tool calls render as in
    CHAT_TEMPLATE, so the specialists' tool-call parsing works unchanged on these models.
    """
    import json

    template = CHAT_TEMPLATE.replace(
        "{%- if has_system -%}{{- text_of(messages[0].content) + '\\n\\n' -}}{%- endif -%}",
        "{%- if has_system -%}{{- text_of(messages[0].content) + '\\n\\n' -}}"
        "{%- else -%}{{- default_system + '\\n\\n' -}}{%- endif -%}",
    ).replace(
        "{%- elif has_system -%}\n  {{- '<|im_start|>system\\n' + text_of(messages[0].content) + '<|im_end|>\\n' -}}\n",
        "{%- elif has_system -%}\n  {{- '<|im_start|>system\\n' + text_of(messages[0].content) + '<|im_end|>\\n' -}}\n"
        "{%- else -%}\n  {{- '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' -}}\n",
    )
    if template.count("default_system") != 2:
        raise RuntimeError("CHAT_TEMPLATE changed shape; update chat_template_with_default_system")
    return "{%- set default_system = " + json.dumps(default_system) + " -%}\n" + template
