"""The gateway server: the HTTP API (``http``: aiohttp routes and ``GatewayServer``, the object
the gateway Ray actor wraps), the control service behind it (``service``: queries, routing,
ingestion, planning rounds, the match store), the persisted query registry (``registry``) and
the bounded match store (``store``)."""
