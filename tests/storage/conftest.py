"""Fixtures of the storage layer's tests: the Redis Cluster and Sentinel set-ups the suite starts
(tests/cluster.py), for the sharded and failed-over topologies."""

from __future__ import annotations

from cluster import clean_cluster as clean_cluster
from cluster import cluster as cluster
from cluster import fresh_cluster as fresh_cluster
from cluster import sentinel_setup as sentinel_setup
