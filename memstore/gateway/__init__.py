"""The HTTP gateway (``memstore serve``, extra ``server``): the upstream's
routes for its existing clients, and memstore's own API under ``/v1``.

Import ``memstore.gateway.app`` / ``memstore.gateway.server`` explicitly; this
package imports nothing heavy so that the CLI starts fast."""
