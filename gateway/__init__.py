"""raycep gateway: the ``raycep`` CLI (the cli package), the HTTP server and control service
(http, service, registry, store), the cluster bootstrap (runtime) and the Python client
(client). See docs/architecture.md."""
