"""The fake OpenAI-compatible server lives with the benchmarks
(memstore.bench.fakeopenai), which run from an installed wheel; tests import
it from there. This name stays for test modules that still use it."""

from memstore.bench.fakeopenai import CHAT_PATH, EMBED_PATH, FakeOpenAI, fake_embedding

__all__ = ["CHAT_PATH", "EMBED_PATH", "FakeOpenAI", "fake_embedding"]
