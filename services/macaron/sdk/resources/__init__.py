"""The SDK's resources (`client.chat`)."""

from macaron.sdk.resources.chat import AsyncChat, Chat

__all__ = ["AsyncChat", "Chat"]
