"""The one prompt renderer: specialists render with it, the router hashes its output for cache affinity.

Both must produce the same text for the same request, so the rules live only here:
`messages.py` holds the plain request types, `convert.py` builds them from `macaron.v1`
protobufs (validating), `render.py` turns a request and a profile into the prompt text.
"""

from macaron.prompting.messages import (
    ChatRequest,
    Message,
    RequestError,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from macaron.prompting.render import PromptProfile, combine_system, render, render_key, template_messages

__all__ = [
    "ChatRequest",
    "Message",
    "PromptProfile",
    "RequestError",
    "ResponseFormat",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "combine_system",
    "render",
    "render_key",
    "template_messages",
]
