"""Register the queries of a query file with the raycep gateway once it answers, then touch a
marker file (the ingestion job waits for it). Queries whose name is already in the gateway's
persisted registry are left as they are.

usage: register_queries.py GATEWAY_URL QUERY_FILE MARKER   (token from $RAYCEP_TOKEN)
"""
import os
import sys
import time

from raycep.cep.errors import CepError, ConflictError, UnavailableError
from raycep.gateway.cli import load_queries
from raycep.gateway.client import connect

WAIT_S = 600


def main(url: str, path: str, marker: str) -> int:
    deadline = time.monotonic() + WAIT_S
    waiting = False
    while True:
        try:                                        # connect() checks /v1/health at once
            client = connect(url, token=os.environ.get("RAYCEP_TOKEN") or None)
            existing = {q["id"] for q in client.queries()}
            break
        except UnavailableError:
            if not waiting:
                print(f"[raycep] waiting for the gateway at {url}", flush=True)
                waiting = True
            if time.monotonic() > deadline:
                print(f"[raycep] the gateway at {url} did not answer in {WAIT_S} s", file=sys.stderr)
                return 1
            time.sleep(2)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        queries = load_queries([path]) if text.strip() else []
    except CepError as exc:                     # gateway.cli.UsageError is a CepError
        print(f"[raycep] gateway.queries cannot be registered: {exc}", file=sys.stderr)
        return 1
    for _, query in queries:
        if query.name in existing:
            print(f"[raycep] query {query.name} is already registered")
            continue
        try:
            client.register(query.text, name=query.name)
            print(f"[raycep] registered query {query.name}")
        except ConflictError:
            print(f"[raycep] query {query.name} is already registered")
    with open(marker, "w", encoding="utf-8"):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
