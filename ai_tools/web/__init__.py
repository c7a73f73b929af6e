"""The HTTP API of the standalone service (twisted.web).

:mod:`ai_tools.web.api` holds the resource and :func:`~ai_tools.web.api.make_web_service`;
:mod:`~ai_tools.web.sse` the event stream, :mod:`~ai_tools.web.body` the body limit,
:mod:`~ai_tools.web.results` the loop results kept for ``/results``,
:mod:`~ai_tools.web.listen` endpoint parsing and the listening service.
See ``docs/http-api.md``.
"""
