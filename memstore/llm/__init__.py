"""Language-model access for derivation: a backend seam, memstore's OpenAI-compatible
backend, and the JSON-answer client with its parser."""

from memstore.llm.backend import ChatAnswer, ChatBackend
from memstore.llm.client import LLMClient, LLMResult
from memstore.llm.jsonparse import parse_json_output
from memstore.llm.openai_backend import OpenAIBackend

__all__ = [
    "ChatAnswer",
    "ChatBackend",
    "LLMClient",
    "LLMResult",
    "OpenAIBackend",
    "parse_json_output",
]
