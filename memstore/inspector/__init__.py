"""The memory inspector: server-rendered pages under ``/ui`` of the gateway
(``memstore serve``, ``memstore ui``) to see and steer what the agent
remembers. Needs the "ui" extra (Jinja2)."""

from memstore.inspector.routes import mount

__all__ = ["mount"]
