"""Every Redis key name, default and limit in one place, so the layout reads in one screen.

The key table in docs/redis-layout.md documents exactly these names.
"""

from __future__ import annotations

from typing import Final

KEY_ROOT: Final = "redelay"

# Per-shard keys, appended to the shard prefix "redelay:{<namespace>.<shard>}:".
JOBS_KEY: Final = "jobs"  # HASH member -> msgpack job record
# The delayed set (lua/_delayed.lua): an index ZSET, a bucket's first member -> its due time
# (ms), over small ZSETs "due:<first member>", member -> due time (ms), each a run of consecutive
# jobs in (due time, member) order. The first bucket may keep the name of a job carried since.
DELAYED_KEY: Final = "due"
DUE_BUCKET_PREFIX: Final = "due:"
# Redis keeps a ZSET of up to zset-max-listpack-entries (128 by default) entries as one listpack,
# which it searches entry by entry on every add: a bucket is not grown past DUE_BUCKET_MAX, half
# that, and one that would be is cut into pieces of DUE_BUCKET_FILL, leaving room for the jobs
# that come next. 64 rather than 128: an add costs Redis a fifth fewer instructions for 2 more
# bytes a job (docs/redis-layout.md#the-delayed-set).
DUE_BUCKET_MAX: Final = 64
DUE_BUCKET_FILL: Final = 48
READY_KEY_PREFIX: Final = "ready:"  # LIST per topic: "ready:<topic>", oldest first
LEASED_KEY: Final = "leased"  # ZSET member -> lease deadline (ms)
TOKENS_KEY: Final = "tokens"  # HASH member -> lease token; "" its pin (see TOKENS_PIN_BYTES)
# The length of the value of the tokens hash's "" field. Longer than hash-max-listpack-value (64
# by default; rarely raised past 1,024), it keeps the hash a hashtable for good: as a listpack
# (up to 128 fields) every HGET, HSET and HDEL of a member scans it, about 5 µs of Redis CPU
# per job at a hundred jobs in flight (issue 15). It also keeps the key when no job is leased,
# so the hash is not made again as a listpack.
TOKENS_PIN_BYTES: Final = 1_100
DEAD_KEY: Final = "dead"  # ZSET member -> time it died (ms)
TOPICS_KEY: Final = "topics"  # HASH topic -> msgpack topic config
COUNTS_KEY: Final = "counts"  # HASH "<topic>|<state>" -> number of jobs
SEQ_KEY: Final = "seq"  # STRING counter for lease tokens
AUDIT_KEY: Final = "audit"  # STREAM of transition events
HISTORY_KEY: Final = "history"  # HASH member -> its audit entry ids (an index); "" when it began
# HASH: the index's previous generation, dropped whole once the stream trimmed all of it (_lib.lua)
HISTORY_PREVIOUS_KEY: Final = "history-previous"
# The index field that holds when its generation began, as "0 <ms>" (rotate_history_index)
HISTORY_GENERATION_FIELD: Final = ""
SCHEDULES_KEY: Final = "schedules"  # HASH schedule name -> msgpack schedule record
GATES_KEY: Final = "gates"  # HASH "<topic>|paused|rate|flight|tat" -> a topic's gate (_gate.lua)
WAKE_CHANNEL: Final = "wake"  # pub/sub channel: a delayed job became the earliest
READY_CHANNEL: Final = "ready"  # pub/sub channel: a topic's ready list has jobs to lease
SLOT_PROBE_KEY: Final = "slot-probe"  # never created: EXISTS on it detects a migrating slot
# STRING per job the outbox relay applied a write for: "outbox:<member>" -> the write's token.
OUTBOX_MARKER_PREFIX: Final = "outbox:"

# Recurring schedules (actors/schedules.py re-exports these; the scripts read them too).
# An occurrence carried later than this after its time was missed: with misfire="skip" dropped.
MISFIRE_GRACE_MS: Final = 60_000
OCCURRENCES_AHEAD: Final = 32  # occurrence times stored with each schedule
REFILL_BELOW: Final = 16  # fewer stored: the carry that moved an occurrence asks for more
# Occurrence ids are "<prefix><schedule name>:<occurrence ms>"; the prefix is reserved.
OCCURRENCE_ID_PREFIX: Final = "@schedule:"

# The one key per namespace, under its own hash tag: "redelay:{<namespace>}:config".
CONFIG_KEY: Final = "config"  # HASH: shard count and audit retention
# Worker heartbeats, under the namespace's own hash tag too (actors/storage/heartbeats.py).
WORKER_KEY_PREFIX: Final = "worker:"  # STRING "worker:<name>" -> JSON heartbeat, with a TTL
WORKERS_KEY: Final = "workers"  # SET of worker names that wrote a heartbeat (an index)

# A job is stored under the member "<topic>|<id>"; topics may not contain the separator.
MEMBER_SEPARATOR: Final = "|"

# Limits on what users pass in. Each is checked before anything is written.
TOPIC_MAX_CHARS: Final = 100
JOB_ID_MAX_CHARS: Final = 200
NAMESPACE_MAX_CHARS: Final = 64
CONSUMER_NAME_MAX_CHARS: Final = 200
BODY_MAX_BYTES: Final = 512 * 1024
# orjson will not serialize arrays and objects nested deeper than this.
BODY_MAX_DEPTH: Final = 254
CALLBACK_URL_MAX_CHARS: Final = 2048
DELAY_MAX_MS: Final = 10 * 366 * 24 * 3600 * 1000  # ten years
SCHEDULE_MAX_STEPS: Final = 100
LEASE_MS_MIN: Final = 100
LEASE_MS_MAX: Final = 24 * 3600 * 1000
BATCH_MAX_JOBS: Final = 10_000  # most jobs one add/ack/fail/extend/release call takes
# DelayQueue.add_stream's jobs per batch: the producer's CPU per job grows with the batch, and
# small batches overlap the two sides more finely (docs/benchmarks.md#design-measurements-historic).
DEFAULT_STREAM_BATCH: Final = 200
CARRY_LIMIT_MAX: Final = 10_000
LEASE_LIMIT_MAX: Final = 10_000
# Most jobs a handler may lease beyond its threads (DelayQueue.handler's prefetch): they wait in
# the process, so a bound keeps a crashed worker from holding many leases until they expire.
PREFETCH_MAX: Final = 10_000
LIST_LIMIT_MAX: Final = 1_000  # most jobs one page of Store.jobs holds
# Most entries of a shard's delayed, leased or dead set one page examines: those sets hold every
# topic, so a rare topic's page may end short (with a cursor) rather than block the server.
LIST_SCAN_ENTRIES: Final = 10_000
REASON_MAX_CHARS: Final = 500
TRACEBACK_MAX_BYTES: Final = 4096  # the end of a failure's traceback, kept with the attempt

# Defaults per topic, each overridable per job.
# The stepped schedule used for notifications: 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h.
DEFAULT_RETRY_SCHEDULE_MS: Final[tuple[int, ...]] = (
    15_000,
    180_000,
    600_000,
    1_800_000,
    1_800_000,
    3_600_000,
    7_200_000,
    21_600_000,
    54_000_000,
)
DEFAULT_LEASE_MS: Final = 30_000

# Audit stream retention: approximate (Redis trims whole radix-tree nodes; see docs/audit.md).
DEFAULT_AUDIT_MAXLEN: Final = 1_000_000
# A full Redis (over maxmemory): how often the carrier reads INFO memory, how often it says so in
# the log, and how many audit entries per shard it keeps while full (history goes before jobs).
REDIS_FULL_CHECK_MS: Final = 1_000
REDIS_FULL_LOG_MS: Final = 60_000
REDIS_FULL_AUDIT_KEEP: Final = 1_000
# "Full" from 1% or 64 KiB under maxmemory, whichever is more (see Store.memory), and until 10%
# or 256 KiB under it. The bytes cover a client connecting or leaving and Redis shrinking a
# query buffer, which move used_memory by tens of KiB: on a small maxmemory that is over 1%.
REDIS_FULL_MARGIN: Final = 0.01
REDIS_FULL_MARGIN_BYTES: Final = 64 * 1024
REDIS_FULL_CLEAR_MARGIN: Final = 0.1
REDIS_FULL_CLEAR_MARGIN_BYTES: Final = 256 * 1024

# A worker writes its heartbeat this often; the key expires after three missed beats, so a
# crashed worker disappears by itself within HEARTBEAT_TTL_MS.
HEARTBEAT_INTERVAL_MS: Final = 5_000
HEARTBEAT_TTL_MS: Final = 15_000
WORKERS_LIST_MAX: Final = 10_000  # most heartbeats one workers() call reads

DEFAULT_CARRY_BATCH: Final = 1_000
DEFAULT_SHARDS: Final = 1
SHARDS_MAX: Final = 1_024  # each shard costs every carrier and sweeper one script call per round

# Topic gates (pause, rate and in-flight limits; lua/_gate.lua).
# A listener held back by a full max_in_flight looks again after this long: the ack that frees a
# slot may come from another process, which tells no one.
GATE_FLIGHT_POLL_MS: Final = 100

# Lost leases (lua/_lost.lua): a lease that expired without a result is lost, not failed. A job
# lost while it ran as a suspect (alone: see SUSPECT_FIELD_SUFFIX) has the loss held against it,
# and is quarantined (dead) once DEFAULT_LOST_MAX losses are (a topic's own lost_max may differ).
DEFAULT_LOST_MAX: Final = 3
LOST_MAX_MAX: Final = 100
# The jobs one sweep finds lost are due this far apart (cycling every 100), not all at once.
LOST_SPREAD_MS: Final = 100
# A gates field "<consumer><suffix>" -> "<member> <token>": the one suspect that consumer runs in
# this shard; while its lease holds, the consumer is leased nothing else here (lease-10.lua).
SUSPECT_FIELD_SUFFIX: Final = "|suspect"
# A consumer that runs a suspect looks for other jobs again after this long: each look is a lease
# call, so a worker running a long suspect makes one a second per topic.
SUSPECT_POLL_MS: Final = 1_000
RATE_MAX_JOBS: Final = 1_000_000  # most jobs a rate may allow per window
RATE_WINDOW_MAX_MS: Final = 24 * 3600 * 1000
IN_FLIGHT_MAX: Final = 1_000_000

# How long a connection that died silently (a partition, a middlebox that forgot it: no FIN, no
# RST) can go unnoticed; docs/operations.md#network-faults sums these up. Clients redelay makes
# from a URL get them unless the URL or the caller sets its own (redis-py 5.3 has no timeouts).
# No command redelay sends blocks in Redis, so a reply is late only when Redis is slow or gone.
SOCKET_TIMEOUT_S: Final = 5.0
SOCKET_CONNECT_TIMEOUT_S: Final = 5.0
# TCP keepalive (Linux names; skipped where the platform lacks one): the kernel finds a dead
# idle peer after idle + interval * probes = 45 s on a real network.
KEEPALIVE_IDLE_S: Final = 30
KEEPALIVE_INTERVAL_S: Final = 5
KEEPALIVE_PROBES: Final = 3
# redis-py PINGs a pooled connection idle longer than this before using it.
HEALTH_CHECK_INTERVAL_S: Final = 30
# The notifier's subscription reads, it never writes, so neither timeouts nor keepalive through
# a proxy notice it die: it PINGs after hearing nothing this long, and calls it dead (and
# subscribes again) when nothing at all came back within the reply wait after a PING or a
# SUBSCRIBE. Worst case from its death: ping + reply + one 0.25 s read.
SUBSCRIPTION_PING_S: Final = 2.0
SUBSCRIPTION_REPLY_S: Final = 3.0
