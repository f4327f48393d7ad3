"""The query language: text -> AST (``ast``, frozen dataclasses; ``parser``; ``builder`` in
Python) -> checked (``validate``) -> compiled (``compiler``: DNF branches, conditions compiled
to closures by ``expressions``, never ``eval``).

Imports only the base of ``raycep.cep`` (errors); nothing here knows events are stored or
evaluated.
"""
