"""The memory console: server-rendered pages at `/console` for operators signed in with an
admin key (`console.enabled`). Every asset is served by the gateway itself (no CDN, no build
step): templates/ (Jinja2, autoescaped) and static/ (one CSS file, one small script)."""

from gateway.http.console.routes import console_routes

__all__ = ["console_routes"]
