"""Language-model access for derivation: an OpenAI-compatible JSON client and parser."""

from memstore.llm.client import LLMClient, LLMResult
from memstore.llm.jsonparse import parse_json_output

__all__ = ["LLMClient", "LLMResult", "parse_json_output"]
