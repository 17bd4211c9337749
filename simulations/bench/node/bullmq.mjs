// BullMQ agent for redelay's benchmarks: `node bullmq.mjs SPEC.json`.
// Speaks the same spec and result files as simulations/bench/agent.py (see recorder.py there):
// a producer adds the scenario's jobs and writes its result; a worker writes the ready file, waits
// for the runner's go file, records every delivery and writes the deliveries once all arrived.
import { readFileSync, writeFileSync, renameSync, existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker } from "bullmq";

const QUEUE_NAME = "bench";
const BODY_BYTES = 100;
// The same padding as jobs.py: Python's json.dumps of {"seq": 100000, "due_ms": 1700000000000,
// "pad": ""} is 51 characters long.
const PAD = "x".repeat(BODY_BYTES - 51);
const FILL_BATCH_JOBS = 1000;
const ENQUEUE_DELAY_MS = 3_600_000;
const TICK_MS = 10;
const WATCH_INTERVAL_MS = 20;
const BATCH_API = "addBulk: one MULTI of Lua calls";
// The docs ask workers to use maxRetriesPerRequest: null so blocking commands are never retried.
const connectionFor = (spec) => ({ path: spec.socket_path, maxRetriesPerRequest: null });
// Jobs are removed once done, as the docs recommend; failed ones are kept (none fail here).
const JOB_OPTIONS = { removeOnComplete: true };

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const scenario = spec.scenario;

function writeJsonAtomic(path, data) {
  writeFileSync(path + ".tmp", JSON.stringify(data));
  renameSync(path + ".tmp", path);
}

const cpuMs = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
};

// mulberry32: a small seeded generator for the steady scenario's delays.
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const random = seeded(spec.seed);

function makeJob(seq) {
  const now = Date.now();
  let due = now + ENQUEUE_DELAY_MS;
  if (scenario.kind === "immediate") due = now;
  else if (scenario.kind === "burst") due = spec.burst_due_ms;
  else if (scenario.kind === "steady") {
    const span = scenario.delay_max_ms - scenario.delay_min_ms;
    due = now + scenario.delay_min_ms + Math.floor(random() * (span + 1));
  }
  return { seq, due_ms: due, pad: PAD };
}

async function produce() {
  const queue = new Queue(QUEUE_NAME, { connection: connectionFor(spec) });
  await queue.waitUntilReady();
  const options = (body) => ({ ...JOB_OPTIONS, delay: Math.max(0, body.due_ms - Date.now()) });
  const send = async (first, end) => {
    if (scenario.call_style === "single") {
      for (let seq = first; seq < end; seq++) {
        const body = makeJob(seq);
        await queue.add(QUEUE_NAME, body, options(body));
      }
    } else {
      const jobs = [];
      for (let seq = first; seq < end; seq++) {
        const body = makeJob(seq);
        jobs.push({ name: QUEUE_NAME, data: body, opts: options(body) });
      }
      await queue.addBulk(jobs);
    }
  };
  const startMs = Date.now();
  const cpuStart = cpuMs();
  let sent = scenario.jobs;
  if (scenario.rate_per_s === null) {
    const size = scenario.call_style === "single" ? 1 : FILL_BATCH_JOBS;
    for (let first = 0; first < scenario.jobs; first += size) {
      await send(first, Math.min(scenario.jobs, first + size));
    }
  } else {
    const started = performance.now();
    sent = 0;
    // Like jobs.py: a producer that cannot keep up stops at 1.5x the duration.
    while (sent < scenario.jobs && performance.now() - started < scenario.duration_s * 1500) {
      const elapsedS = (performance.now() - started) / 1000;
      const owed = Math.min(
        scenario.jobs,
        Math.floor(elapsedS * scenario.rate_per_s) + 1,
        sent + FILL_BATCH_JOBS, // a producer that fell behind rechecks its deadline
      );
      if (owed > sent) {
        await send(sent, owed);
        sent = owed;
      } else {
        await sleep(TICK_MS);
      }
    }
  }
  const endMs = Date.now();
  const result = {
    enqueued: sent,
    start_ms: startMs,
    end_ms: endMs,
    cpu_ms: cpuMs() - cpuStart,
    batch_api: BATCH_API,
    jobs_per_s: sent / Math.max(1e-9, (endMs - startMs) / 1000),
  };
  await queue.close();
  writeJsonAtomic(spec.out_path, result);
}

async function work() {
  let expected = spec.expected;
  const seen = new Uint8Array(expected);
  const lateness = [];
  let duplicates = 0;
  let unknown = 0;
  let firstMs = null;
  let lastMs = null;
  let written = false;
  const write = () => {
    if (written) return;
    written = true;
    writeJsonAtomic(spec.out_path, {
      delivered: lateness.length,
      expected,
      duplicates,
      unknown,
      first_ms: firstMs,
      last_ms: lastMs,
      cpu_ms: cpuMs(),
      lateness_ms: lateness.map((x) => Math.round(x * 1000) / 1000),
    });
  };
  const delivered = (body) => {
    const atMs = performance.timeOrigin + performance.now();
    const seq = body.seq;
    if (!(seq >= 0 && seq < seen.length)) {
      unknown += 1;
      return;
    }
    if (seen[seq]) {
      duplicates += 1;
      return;
    }
    seen[seq] = 1;
    lateness.push(atMs - body.due_ms);
    if (firstMs === null) firstMs = atMs;
    lastMs = atMs;
    if (lateness.length >= expected) write();
  };
  const worker = new Worker(QUEUE_NAME, async (job) => delivered(job.data), {
    connection: connectionFor(spec),
    // bullmq-tuned: a high concurrency, as BullMQ's docs advise for I/O-bound processors.
    concurrency: spec.system.endsWith("-tuned") ? 100 : 10,
    autorun: false,
  });
  await worker.waitUntilReady();
  writeJsonAtomic(spec.ready_path, { pid: process.pid, cpu_ms: cpuMs(), at_ms: Date.now() });
  setInterval(() => {
    // A paced producer that could not keep up added fewer jobs: the runner says how many.
    if (existsSync(spec.out_path + ".expect")) {
      const added = parseInt(readFileSync(spec.out_path + ".expect", "utf8"), 10);
      if (added < expected) expected = added;
      if (lateness.length >= expected) write();
    }
    if (existsSync(spec.out_path + ".dump")) write();
    if (existsSync(spec.out_path + ".stop")) process.exit(0);
  }, WATCH_INTERVAL_MS);
  while (!existsSync(spec.out_path + ".go")) await sleep(5);
  await worker.run();
}

if (spec.role === "producer") {
  await produce();
  process.exit(0);
} else {
  await work();
}
