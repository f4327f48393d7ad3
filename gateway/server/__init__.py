"""The gateway server: the HTTP API (``http``: aiohttp routes and ``GatewayServer``, the object
the gateway Ray actor wraps), the control service behind it (``service``: a facade over one
manager per concern: ``actors`` the handles, scopes and routing; ``queries`` the query
lifecycle; ``ingest`` events and watermarks; ``drain`` the actors' outboxes into the store;
``planning`` planner rounds; with ``checks``, ``messages`` and ``settings``), the persisted
query registry (``registry``) and the bounded match store (``store``)."""
