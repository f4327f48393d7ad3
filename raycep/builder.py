"""Build queries in Python (``raycep.builder``): ``query``, ``seq``, ``var``, ``attr``, ...
give the same ``Query`` the parser makes from text; ``str(query)`` prints it as text.
The functions and their rules: raycep.cep.lang.builder."""
from raycep.cep.lang.builder import *  # noqa: F401,F403  (the public names: its __all__)
from raycep.cep.lang.builder import __all__  # noqa: F401
