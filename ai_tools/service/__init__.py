"""The service layer: ``AssistantService`` ticks many assistants on one reactor.

Modules: :mod:`.service` (the ``MultiService``, composed of the parts below),
:mod:`.resources` (model clients, store, registry, world, cache, clock),
:mod:`.live_roster` (adding, restoring, removing, reconfiguring), :mod:`.hearing`
(what characters hear becomes events), :mod:`.subagents`, :mod:`.emergency` (the kill
and the emergency stop), :mod:`.observers`, :mod:`.tracing`, :mod:`.stopping` (the
stop sequence), :mod:`.assistant` (one assistant's configuration and state),
:mod:`.tick` (one tick), :mod:`.scheduling` (one ``LoopingCall`` for every assistant),
:mod:`.state_writer` (grouped state writes), :mod:`.patterns` (execution-pattern
selection), :mod:`.episodes` (conversation episodes).  See ``docs/service.md``.
"""

from ai_tools.service.assistant import AssistantConfig
from ai_tools.service.service import AssistantService
from ai_tools.service.tick import TickResult

__all__ = ["AssistantConfig", "AssistantService", "TickResult"]
