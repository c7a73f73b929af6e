"""The HTTP API of the standalone service (twisted.web).

:mod:`ai_tools.web.api` holds the resource, the site and
:func:`~ai_tools.web.api.make_web_service`; :mod:`~ai_tools.web.messages`
``POST /messages``; :mod:`~ai_tools.web.event_hub` and :mod:`~ai_tools.web.sse`
the event streams; :mod:`~ai_tools.web.connections` the connection caps and
request deadlines; :mod:`~ai_tools.web.origin` the Host/Origin rule;
:mod:`~ai_tools.web.body` the body limit and content type;
:mod:`~ai_tools.web.limits` every bound as a setting;
:mod:`~ai_tools.web.results` the loop results kept for ``/results``;
:mod:`~ai_tools.web.listen` endpoint parsing and the listening service.
See ``docs/http-api.md``.
"""
