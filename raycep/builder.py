"""Build queries in Python (``raycep.builder``): ``query``, ``seq``, ``var``, ``attr``, ...
give the same ``Query`` the parser makes from text; ``str(query)`` prints it as text.
The functions and their rules: raycep.cep.builder."""
from raycep.cep.builder import *  # noqa: F401,F403  (the public names, cep.builder.__all__)
from raycep.cep.builder import __all__  # noqa: F401
