"""The web console: an operator's page served by the HTTP API's own listener.

:mod:`~ai_tools.web.console.pages` serves the page and its files (``GET /``
when a browser asks for HTML, ``/console/...``) from the installed package;
:mod:`~ai_tools.web.console.session` signs a browser in (the token entered
once, exchanged for an ``HttpOnly``, ``SameSite=Strict`` cookie).  The page
itself (``static/``) is plain JavaScript modules and CSS, no build step.
See ``docs/web-console.md``.
"""

from ai_tools.web.console.pages import ConsolePages, RawAnswer
from ai_tools.web.console.session import SessionCookies

__all__ = ["ConsolePages", "RawAnswer", "SessionCookies"]
