"""raycep actors: partition workers (one shared index + many pattern managers) and routing.

Importing this package does not import ray; ``partition_actor()`` does.
"""
from raycep.actors.partition import PartitionWorker, WorkerSettings, partition_actor
from raycep.actors.routing import GLOBAL_PARTITION, event_key, partition_of, split_by_partition

__all__ = ["PartitionWorker", "WorkerSettings", "partition_actor",
           "GLOBAL_PARTITION", "event_key", "partition_of", "split_by_partition"]
