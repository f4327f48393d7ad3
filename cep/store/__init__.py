"""How events are held: the shared, time-ordered event index (``index``), the rows of a batch
kept as columns until read (``batch``, with ``values`` and ``arrow`` to decode and build Arrow
arrays), and the arrival order of the input (``disorder``: out-of-order scores, watermarks,
late events).

Imports only the base of ``raycep.cep`` (errors, event).
"""
