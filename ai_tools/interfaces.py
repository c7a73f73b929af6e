"""The contracts between the layers of ai_tools.

Every contract lives here so that a layer can depend on what the layer below
promises without importing its implementation.  Implementations declare
``@implementer(IContract)`` and their tests check them with
``zope.interface.verify.verifyObject``.

A method documented as returning "a value or a Deferred" may do either: callers
always go through ``defer.maybeDeferred`` (or ``yield`` inside
``inlineCallbacks``, which accepts plain values).  The Evennia adapter answers
synchronously from the ORM; the sandbox world and the SQLite store answer with
Deferreds from a thread pool.

Identifiers of world objects are strings (``"#12"`` under Evennia, ``"room:plaza"``
in the sandbox).  Objects cross this boundary as plain JSON-serialisable dicts so
that tool results can go straight into a model's history.
"""

from __future__ import annotations

from collections.abc import Mapping

from zope.interface import Attribute, Interface


class IWorldObjects(Interface):
    """The world model: objects, rooms and exits, their attributes and tags,
    the acting character's rights, and prototypes to spawn.

    Object dicts have at least ``id``, ``key``, ``kind`` (``"room"``, ``"exit"``,
    ``"character"``, ``"object"``), ``description`` and ``location`` (an id or
    None).  Every mutating method takes the acting character's id so that the
    world can apply that character's own permissions; a refusal raises
    :class:`ai_tools.errors.PermissionDenied`, a missing object raises
    :class:`ai_tools.errors.NotFound`.
    """

    def get_object(obj_id):
        """Return the object dict for ``obj_id``, or None. Value or Deferred."""

    def describe_location(char_id, detail="normal"):
        """Describe the room ``char_id`` stands in.

        Returns ``{"room": {...}, "exits": [{"key", "destination"}],
        "contents": [objects], "characters": [characters]}`` (the acting
        character excluded). ``detail`` is ``"brief"``, ``"normal"`` or
        ``"detailed"`` (detailed adds attributes and tags). Value or Deferred.
        """

    def search(query, *, char_id=None, location=None, kind=None, limit=10):
        """Find objects whose key or aliases match ``query`` (best match first).

        ``location`` limits the search to one room's contents, ``kind`` to one
        kind.  Returns a list of object dicts. Value or Deferred.
        """

    def get_attributes(obj_id, names=None):
        """Return ``{name: value}`` of ``obj_id``'s attributes (all, or ``names``)."""

    def set_attribute(char_id, obj_id, name, value):
        """Set an attribute as ``char_id`` (permission-checked). Returns the object dict."""

    def delete_attribute(char_id, obj_id, name):
        """Remove an attribute as ``char_id`` (permission-checked). Returns True if it existed."""

    def get_tags(obj_id, category=None):
        """Return ``[{"tag", "category"}]`` on ``obj_id``."""

    def add_tag(char_id, obj_id, tag, category=None):
        """Add a tag as ``char_id`` (permission-checked)."""

    def remove_tag(char_id, obj_id, tag, category=None):
        """Remove a tag as ``char_id`` (permission-checked). Returns True if it existed."""

    def search_by_tag(tag, category=None, limit=50):
        """Return the object dicts carrying ``tag`` (in ``category`` if given)."""

    def has_permission(char_id, permission):
        """Whether ``char_id`` holds ``permission`` (e.g. ``"Builder"``). Value or Deferred."""

    def list_prototypes():
        """Return ``[{"key", "description"}]`` of the prototypes that can be spawned."""

    def spawn_prototype(char_id, prototype_key, location=None, overrides=None):
        """Create an object from a prototype as ``char_id``. Returns the new object dict.

        ``overrides`` may hold ``key``, ``aliases``, ``description``,
        ``attributes`` (a mapping of attribute name to value) and ``tags``;
        each host translates them to its own prototype keys (Evennia: ``desc``,
        ``attrs``).  Keys that would change identity or rights are refused.
        """


class IWorldCommands(Interface):
    """Running world commands as a character, and the help they answer from."""

    def execute_command(char_id, command):
        """Run one world command as ``char_id`` with its own rights.

        Returns ``{"command": ..., "output": [lines], "success": bool}`` and,
        when it did not succeed, ``"error"`` (a short code such as
        ``unknown_command``, ``usage``, ``permission_denied``, ``not_found``);
        refusals are reported like a game would, not raised.  An answer
        without ``success`` counts as a success.
        """

    def help_search(query, limit=5):
        """Search the host's help entries: ``[{"key", "text", "score"}]``."""


class IWorldMessages(Interface):
    """Messages between characters: rooms, whispers and pages, channels, and
    listening to what one character hears."""

    def message_location(char_id, text, kind="say", exclude=(), dedupe_key=None):
        """Deliver ``text`` from ``char_id`` to everyone in its room.

        ``kind`` is ``"say"``, ``"pose"`` or ``"emit"``.  Returns the list of
        character ids that received it.  ``dedupe_key`` (a tool call's effect
        key, or None) delivers a message asked for again under the same key
        once: a world shared by several processes keeps the first (a call made
        again after a failover); a world of one process, where a call runs
        once, may ignore it.  The same holds for the two methods below.
        """

    def message_character(char_id, target_id, text, kind="whisper", dedupe_key=None):
        """Deliver ``text`` from ``char_id`` to one character (``"whisper"`` or ``"page"``)."""

    def channel_send(char_id, channel, text, dedupe_key=None):
        """Post ``text`` on a channel as ``char_id``. Returns the receiving character ids."""

    def list_channels():
        """Return ``[{"key", "description"}]``."""

    def subscribe(char_id, listener):
        """Call ``listener(WorldMessage)`` for everything ``char_id`` hears.

        Returns a zero-argument callable that unsubscribes.
        """


class IWorld(IWorldObjects, IWorldCommands, IWorldMessages):
    """The world a tool acts on: the sandbox world or a running Evennia game.

    The union of the world's concerns (as Twisted's reactor is the union of
    ``IReactorTCP``, ``IReactorTime``...): code that needs one concern may ask for
    its narrower interface; a host declares ``IWorld`` and so provides all three.
    """

    name = Attribute("Short name of the host, e.g. 'sandbox' or 'evennia'.")


class IAssistantStates(Interface):
    """The saved state of each assistant (its history, pending events, mode...).

    Every method returns a Deferred.
    """

    def load_assistant(name):
        """Return the saved state dict of assistant ``name`` or None.

        A saved history whose last assistant message has tool calls without
        answers gets a synthetic ``interrupted`` tool result for each of them.
        """

    def save_assistant(name, state):
        """Write the whole state dict of ``name`` in one transaction."""

    def save_many(states):
        """Write the state dicts of ``{name: state}`` in one transaction (all or none)."""

    def delete_assistant(name):
        """Forget assistant ``name`` and its state."""

    def list_assistants():
        """Names of the assistants with saved state."""


class ICacheStore(Interface):
    """The tool cache's persistent scope.  Every method returns a Deferred."""

    def cache_get(namespace, key, now):
        """Return the cached value or None (entries with ``expires_at <= now`` are misses)."""

    def cache_put(namespace, key, value, expires_at):
        """Store a value (``expires_at`` None: no expiry)."""

    def cache_invalidate(namespace):
        """Drop every entry of ``namespace``."""


class IRecordStore(Interface):
    """Searchable records: memories, journal entries, episodes, entity notes, goals.

    Every method returns a Deferred.
    """

    def add_record(owner, collection, content, metadata=None, parent_id=None):
        """Add a searchable record (memory, journal entry, episode, entity note, goal).

        Returns the record dict ``{"id", "owner", "collection", "content",
        "metadata", "parent_id", "created_at", "updated_at"}``.
        """

    def update_record(record_id, content=None, metadata=None):
        """Change a record; returns the updated dict or None if unknown."""

    def delete_record(record_id):
        """Remove a record (its children lose their parent). True if it existed."""

    def get_record(record_id):
        """Return one record dict or None."""

    def list_records(owner, collection, limit=20, newest_first=True, parent_id=None):
        """Records of one collection in time order."""

    def search_records(owner, collection, query, limit=10):
        """Full-text search, best first; each record carries ``score`` (higher is better)."""


class IStore(IAssistantStates, ICacheStore, IRecordStore):
    """Persistence for assistants: state, history, events, cache and records.

    The union of the stores' concerns (as Twisted's reactor is the union of
    ``IReactorTCP``, ``IReactorTime``...), plus opening and closing: code that
    needs one concern may ask for its narrower interface.  Every method returns
    a Deferred.  The SQLite and PostgreSQL stores run them on store threads
    through ``twisted.enterprise.adbapi``; the memory store answers at once.
    Values are JSON-serialisable.
    """

    def open():
        """Create or migrate the schema. Deferred firing when ready."""

    def close():
        """Release connections. Deferred."""


class ITraceStore(Interface):
    """The loop traces a store keeps for the console (:mod:`ai_tools.store.traces`).

    Every method returns a Deferred.
    """

    def save_trace(trace, keep):
        """Keep one loop trace, and only the newest ``keep`` of its assistant; its id."""

    def list_traces(search):
        """The summaries of the newest traces a ``TraceFilter`` asks for, newest first."""

    def get_trace(trace_id):
        """One stored trace, whole (None: not kept)."""


class IWorldStore(Interface):
    """Persistence of the sandbox world, offered by the stores next to IStore.

    The world is kept in sections of JSON rows: ``"objects"`` (keyed by
    ``"id"``), ``"channels"``, ``"prototypes"`` and ``"help"`` (keyed by
    ``"key"``), plus ``"meta"``, a ``{key: value}`` mapping.  Every method
    returns a Deferred.
    """

    def load_world():
        """Return ``{"objects": [...], "channels": [...], "prototypes": [...],
        "help": [...], "meta": {...}}``, or None when no world was ever written."""

    def write_world(put=None, delete=None):
        """Upsert ``put`` (``{section: [rows]}``, ``"meta"``: a mapping) and delete
        ``delete`` (``{section: [keys]}``) in one transaction; deletes apply first."""


WORLD_SECTIONS: Mapping[str, str] = {
    "objects": "id",
    "channels": "key",
    "prototypes": "key",
    "help": "key",
}
"""The sections of :class:`IWorldStore` kept as rows of JSON, and the field that keys each
row (``"meta"`` is a further section holding a plain ``{key: value}`` mapping).  Part of
the contract: the worlds write these rows and the stores keep them."""


class IHeardLog(Interface):
    """What the characters of a single-process sandbox world heard, kept across restarts.

    A message is ``(seq, data, receivers)``: its number, its JSON text (the
    message's fields but ``seq``) and the JSON list of who heard it.  Every
    method returns a Deferred.  (A shared world keeps its messages through
    ISharedWorldStore instead.)
    """

    def append_heard(messages, keep):
        """Add ``messages`` in one transaction, then keep only the newest ``keep``."""

    def load_heard(limit):
        """The newest ``limit`` messages, oldest first."""


class ISharedWorldStore(Interface):
    """A store several worker processes share the sandbox world through (PostgreSQL).

    Rows carry a ``version``: the **world clock** value of the transaction that
    last wrote them.  The clock rises once per world-changing transaction, in
    commit order, and numbers the messages too (their ``seq``), so a reader
    that has seen clock ``C`` has seen every change and message up to ``C``.
    Every method returns a Deferred.
    """

    def change_world(put=None, delete=None, *, expect=None, touch=(), messages=()):
        """Apply one world change in one transaction step; fires ``{"clock", "seqs"}``.

        ``put``/``delete`` as :meth:`IWorldStore.write_world`; ``expect`` maps
        ``(section, key)`` to the version the row must still have (None: must
        not exist), else :class:`ai_tools.errors.WorldConflict` and nothing is
        applied; ``touch`` rows get a new version without new data;
        ``messages`` are ``{"data": {...}, "receivers": [ids], "dedupe_key"}``
        numbered in order.  Fires once committed.
        """

    def load_shared_world(log_size):
        """``{"clock", section: [(row, version)], "meta": {key: (value, version)},
        "messages": [(seq, data, receivers)]}`` (what each character heard last,
        ``log_size`` each) in one snapshot, or None when there is no world."""

    def world_since(clock, dirty=(), limit=1000):
        """What changed after ``clock`` (``{"clock", "rows", "meta", "deleted",
        "messages", "dirty_rows"}``); ``dirty`` rows are read whatever their version."""

    def listen_world(on_change, on_connect):
        """Call ``on_change(clock)`` when any process changes the world; returns ``stop()``."""


class ILLMClient(Interface):
    """A chat-completion model.

    ``complete`` returns a Deferred firing with an
    :class:`ai_tools.llm.events.ChatResponse`, or failing with an
    :class:`ai_tools.errors.LLMError` subclass that carries the text produced
    so far.  Cancelling the Deferred aborts the request for real.
    """

    model = Attribute("Model name sent to the server.")
    context_window = Attribute("Context window of the model in tokens.")

    def complete(messages, tools=None, tool_choice=None, stream=None, on_event=None):
        """Ask the model. ``on_event`` receives each streamed semantic event."""

    def close():
        """Stop: close the connection pool. Deferred."""


class IProfiledLLMClient(ILLMClient):
    """A model client configured by a :class:`~ai_tools.llm.profile.ModelProfile`.

    The loop follows the profile's ``tool_calling`` (native or fallback) when its
    config does not say; a client that does not declare a profile is taken as native.
    """

    profile = Attribute("The client's ai_tools.llm.profile.ModelProfile.")


class IAttemptObservingLLMClient(ILLMClient):
    """A model client that tells an observer of each HTTP attempt of a request.

    The loop passes its ``on_request`` observer (tracing adds a ``traceparent``
    header there) only to clients that declare this interface.
    """

    def complete(messages, tools=None, tool_choice=None, stream=None, on_event=None, *,
                 on_attempt=None):
        """As :meth:`ILLMClient.complete`; ``on_attempt`` is called with each attempt."""


class IModelServerClient(ILLMClient):
    """A model client of one model server that several assistants share.

    Each assistant calls its own view (its turn in the server's fair queue, its own
    breaker), and status pages read the server's slots and queue.  The service asks
    ``IModelServerClient.providedBy(client)``; a client without it (a test's) is called
    directly and shows no server.
    """

    def for_assistant(name):
        """The :class:`ILLMClient` assistant ``name`` calls (it provides
        :class:`IRefusingLLMClient`)."""

    def status():
        """The server as status pages show it: slots, requests in flight and waiting, the
        breakers (a JSON object)."""


class IRefusingLLMClient(ILLMClient):
    """A model client that can say, without calling, that a call would be refused now
    (an open breaker): the service then skips the tick and leaves the events pending."""

    def refusal():
        """The ``LLMUnavailable`` the next call would fail with at once, or None."""


class IAssistantRuntime(Interface):
    """What a tool may ask of the assistant it acts for.

    Tools reach it as ``actor.assistant``; it is None when a tool runs outside
    an assistant (a test, a console call).
    """

    name = Attribute("The assistant's name.")
    mode = Attribute("Current operating mode: 'awake' or 'sleep'.")
    llm = Attribute("The assistant's ILLMClient.")
    execution_config = Attribute("The assistant's execution config (a mapping).")

    def set_mode(mode, reason=""):
        """Switch between 'awake' and 'sleep'."""

    def queue_event(event):
        """Queue a pending event dict for the assistant's next tick."""

    def set_system_prompt(text):
        """Replace the assistant's persona / system prompt."""

    def status():
        """A JSON-serialisable status dict (mode, counters, ticks, tool budget...)."""

    def start_subagent(task, tool_names, budget):
        """Start a delegated sub-agent; returns its id at once (runs in the background)."""

    def subagent_status(task_id):
        """Status dict of a delegated task, or None."""
