"""The engine and what it runs: ``engine`` (one shared index and many queries, push-based,
snapshot and restore), query ``groups`` (queries that differ only in constants evaluated as
one) and ``unseen`` (warnings about what a query reads that the input never had).

The top layer of ``raycep.cep``: it may import every other.
"""
