// The real Mastra packages (@mastra/pg, @mastra/memory) on a PostgreSQL database shared with threadmind.
//
// Usage (from a folder whose node_modules holds the packages pinned in interop/pg/package-lock.json;
// tests/interop/test_mastra_pg.py installs them into a cache folder and copies this script there):
//   node mastra_pg.mjs init  <dsn>                 create Mastra's tables (PostgresStore.init)
//   node mastra_pg.mjs read  <dsn>                 print what Mastra reads
//   node mastra_pg.mjs write <dsn> <manifest.json> write the manifest's threads, messages and resources the way
//                                                  Mastra does, then print what Mastra reads
//
// Output of read/write: one JSON object { threads: [...listThreads createdAt ASC], messages: {threadId: [...recall
// perPage false]}, resources: {resourceId: getResourceById}, workingMemory: {resource: {...}, thread: {...}},
// observationalMemory: {threadId: getObservationalMemory(threadId, resourceId)} }. write also leaves one buffered chunk
// (Mastra's async buffering) on thread-basic's observational-memory record.

import { PostgresStore } from '@mastra/pg';
import { Memory } from '@mastra/memory';
import fs from 'node:fs';

const [mode, dsn, manifestPath] = process.argv.slice(2);
if (!mode || !dsn) {
  console.error('usage: node mastra_pg.mjs init|read|write <dsn> [manifest.json]');
  process.exit(2);
}

const storage = new PostgresStore({ id: 'threadmind-interop', connectionString: dsn });
const memory = new Memory({
  storage,
  options: { lastMessages: 10, semanticRecall: false, workingMemory: { enabled: true, scope: 'resource' } },
});
const threadScope = { workingMemory: { enabled: true, scope: 'thread' } };

async function read() {
  const store = await storage.getStore('memory');
  const { threads } = await memory.listThreads({ perPage: false, orderBy: { field: 'createdAt', direction: 'ASC' } });
  const out = { threads, messages: {}, resources: {}, workingMemory: { resource: {}, thread: {} }, observationalMemory: {} };
  for (const thread of threads) {
    const recalled = await memory.recall({ threadId: thread.id, resourceId: thread.resourceId, perPage: false });
    out.messages[thread.id] = recalled.messages;
    out.workingMemory.thread[thread.id] = await memory.getWorkingMemory({
      threadId: thread.id,
      resourceId: thread.resourceId,
      memoryConfig: threadScope,
    });
    out.observationalMemory[thread.id] = await store.getObservationalMemory(thread.id, thread.resourceId);
    if (!(thread.resourceId in out.resources)) {
      out.resources[thread.resourceId] = await store.getResourceById({ resourceId: thread.resourceId });
      out.workingMemory.resource[thread.resourceId] = await memory.getWorkingMemory({
        threadId: thread.id,
        resourceId: thread.resourceId,
      });
    }
  }
  return out;
}

const revive = (message) => ({ ...message, createdAt: new Date(message.createdAt) });

async function write(manifest) {
  const store = await storage.getStore('memory');
  for (const thread of manifest.threads) {
    await store.saveThread({
      thread: { ...thread, createdAt: new Date(thread.createdAt), updatedAt: new Date(thread.updatedAt) },
    });
  }
  for (const messages of Object.values(manifest.messages)) {
    // Two calls per thread (the tied messages of thread-untitled land in both), as the fixture was written.
    const half = Math.ceil(messages.length / 2);
    await store.saveMessages({ messages: messages.slice(0, half).map(revive) });
    await store.saveMessages({ messages: messages.slice(half).map(revive) });
  }
  for (const resource of manifest.resources) {
    if (resource.stored) {
      await store.updateResource({
        resourceId: resource.id,
        workingMemory: resource.workingMemory ?? undefined,
        metadata: resource.metadata,
      });
    }
  }
  await memory.updateWorkingMemory({
    threadId: 'thread-wm',
    resourceId: 'res-carol',
    workingMemory: '# Scratch\n- written by Mastra\n',
    memoryConfig: threadScope,
  });
  await store.updateThread({ id: 'thread-meta', title: 'Café ✓ 日本語 notes', metadata: { editedBy: 'mastra' } });
  const record = await store.initializeObservationalMemory({
    threadId: 'thread-basic',
    resourceId: 'res-alice',
    scope: 'thread',
    config: { observation: { messageTokens: 30000 }, reflection: { observationTokens: 40000 } },
    observedTimezone: 'Europe/Berlin',
  });
  // Observations computed ahead by Mastra's async buffering: one chunk of the first exchange, not yet active.
  await store.updateBufferedObservations({
    id: record.id,
    chunk: {
      cycleId: 'mastra-cycle-1',
      observations: 'Date: Mar 1, 2025\n* 🔴 (09:00) Alice plans a trip to Kyoto',
      tokenCount: 12,
      messageIds: ['msg-basic-01', 'msg-basic-02'],
      messageTokens: 40,
      lastObservedAt: new Date('2025-03-01T09:00:05.000Z'),
      suggestedContinuation: 'Ask about her hotel.',
    },
    lastBufferedAtTime: new Date('2025-03-01T09:00:06.000Z'),
  });
  return read();
}

async function main() {
  await storage.init();
  if (mode === 'init') return {};
  if (mode === 'read') return read();
  if (mode === 'write') return write(JSON.parse(fs.readFileSync(manifestPath, 'utf8')));
  throw new Error(`unknown mode ${mode}`);
}

main().then(
  async (result) => {
    process.stdout.write(JSON.stringify(result));
    await storage.close?.();
    process.exit(0);
  },
  (error) => {
    console.error(`mastra_pg.mjs: ${error?.stack ?? error}`);
    process.exit(1);
  },
);
