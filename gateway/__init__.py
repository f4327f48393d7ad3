"""raycep gateway: what stands between users and the actors, one home per concern:

- ``gateway.cli``: the ``raycep`` command line (one package, one module per subcommand);
- ``gateway.client``: the Python client (core install: no Ray, Spark or aiohttp);
- ``gateway.server``: the gateway server (HTTP API, control service, registry, match store);
- ``gateway.runtime``: starting and stopping a cluster (on Ray, or in one process).

See docs/architecture.md."""
