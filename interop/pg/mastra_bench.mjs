// Mastra's side of bench/bench_mastra.py: the shared workload (bench/WORKLOAD.md) through the real `@mastra/memory`
// Memory on `@mastra/pg` (PostgresStore, and PgVector with the workload's hash embedder for the semantic phases), or
// on `@mastra/libsql` (LibSQLStore on a local file, LibSQLVector on `<file>.vectors.db`) for a `file:` target.
//
// Usage (from a folder whose node_modules holds the packages pinned in interop/pg/package-lock.json, or for a
// `file:` target those of interop/package-lock.json):
//   node mastra_bench.mjs <phase> <dsn or file: URL> <workload.json>
// phase: save_sequential | save_concurrency_16 | recall_last_10 | semantic (16 saves in flight, then the queries).
// workload.json: { threads: [{id, resourceId, title}], turns: [[message, message], ...] per thread, in order,
// resourceQueries / threadQueries: [{threadId, resourceId, text}], recalls: [[threadId, resourceId], ...] }.
// Prints one JSON object: seconds, msgs_per_s, latencies (ms) of the timed calls.

import { Memory } from '@mastra/memory';
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';

const [phase, target, workloadPath] = process.argv.slice(2);
const workload = JSON.parse(fs.readFileSync(workloadPath, 'utf8'));
const DIM = 384;

// WORKLOAD.md §7: FNV-1a-32 over every window of three UTF-16 code units of the lower-cased text, signed by the
// hash's top bit, normalised (float64, in index order); a zero vector becomes [1, 0, ...].
function hashEmbed(text) {
  const lower = text.toLowerCase();
  const v = new Float64Array(DIM);
  for (let i = 0; i + 3 <= lower.length; i++) {
    let h = 2166136261;
    for (let j = i; j < i + 3; j++) {
      h = Math.imul(h ^ lower.charCodeAt(j), 16777619) >>> 0;
    }
    v[h % DIM] += h >= 2147483648 ? -1 : 1;
  }
  let norm = 0;
  for (let i = 0; i < DIM; i++) norm += v[i] * v[i];
  norm = Math.sqrt(norm);
  if (norm === 0) {
    const out = new Array(DIM).fill(0);
    out[0] = 1;
    return out;
  }
  return Array.from(v, (x) => x / norm);
}

const embedder = {
  specificationVersion: 'v2',
  provider: 'threadmind-bench',
  modelId: 'hash-384',
  maxEmbeddingsPerCall: 2048,
  supportsParallelCalls: true,
  async doEmbed({ values }) {
    return { embeddings: values.map(hashEmbed), usage: { tokens: values.reduce((n, t) => n + Math.ceil(t.length / 4), 0) } };
  },
};

const semantic = phase === 'semantic';
export function vectorsUrl(fileUrl) {
  return `${fileUrl.replace(/\.db$/, '')}.vectors.db`;
}

// Each backend's store and vector store with their defaults (the package is imported only for its backend).
async function backend() {
  if (target.startsWith('file:')) {
    const { LibSQLStore, LibSQLVector } = await import('@mastra/libsql');
    // The vectors in a file of their own: on the store's file, LibSQLVector's writes beside 16 saves in flight
    // fail with SQLITE_BUSY (it sets no busy timeout).
    return { storage: new LibSQLStore({ id: 'bench', url: target }),
             vector: () => new LibSQLVector({ id: 'bench-vectors', url: vectorsUrl(target) }) };
  }
  const { PostgresStore, PgVector } = await import('@mastra/pg');
  return { storage: new PostgresStore({ id: 'bench', connectionString: target }),
           vector: () => new PgVector({ id: 'bench-vectors', connectionString: target }) };
}
const { storage, vector } = await backend();
const vectorStore = semantic ? vector() : undefined;
const memory = new Memory({
  storage,
  ...(semantic ? { vector: vectorStore, embedder } : {}),
  options: {
    lastMessages: 10,
    semanticRecall: semantic ? { topK: 4, messageRange: 1, scope: 'resource' } : false,
  },
});

const revive = (m) => ({ ...m, createdAt: new Date(m.createdAt) });
const turns = workload.turns.map((thread) => thread.map((turn) => turn.map(revive)));

function percentiles(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99) };
}

async function createThreads() {
  for (const thread of workload.threads) {
    await memory.createThread({ threadId: thread.id, resourceId: thread.resourceId, title: thread.title });
  }
}

async function saveAll(concurrency) {
  const latencies = [];
  let next = 0;
  async function worker() {
    while (next < turns.length) {
      const thread = turns[next++];
      for (const turn of thread) {
        const started = performance.now();
        await memory.saveMessages({ messages: turn });
        latencies.push(performance.now() - started);
      }
    }
  }
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  const messages = turns.reduce((n, thread) => n + thread.reduce((k, turn) => k + turn.length, 0), 0);
  return { messages, seconds, msgs_per_s: Math.round(messages / seconds), ...percentiles(latencies) };
}

async function timed(calls) {
  const latencies = [];
  let returned = 0;
  for (const call of calls) {
    const started = performance.now();
    const result = await call();
    latencies.push(performance.now() - started);
    returned += result.messages.length;
  }
  return { calls: calls.length, messages_returned: returned, ...percentiles(latencies) };
}

async function main() {
  await storage.init();
  await createThreads();
  const out = { phase };
  if (phase === 'save_sequential') {
    out.save = await saveAll(1);
  } else if (phase === 'save_concurrency_16') {
    out.save = await saveAll(16);
  } else if (phase === 'recall_last_10') {
    await saveAll(16);
    out.recall = await timed(workload.recalls.map(([threadId, resourceId]) => () => memory.recall({ threadId, resourceId })));
  } else if (semantic) {
    out.save = await saveAll(16);
    out.vectors = (await vectorStore.describeIndex({ indexName: 'memory_messages_384' })).count;
    for (const [scope, queries] of [['resource', workload.resourceQueries], ['thread', workload.threadQueries]]) {
      const threadConfig = { semanticRecall: { topK: 4, messageRange: 1, scope } };
      out[`${scope}_query`] = await timed(queries.map((q) => () => memory.recall({
        threadId: q.threadId, resourceId: q.resourceId, perPage: 0, vectorSearchString: q.text, threadConfig,
      })));
    }
  } else {
    throw new Error(`unknown phase ${phase}`);
  }
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0), (error) => {
  console.error(error);
  process.exit(1);
});
