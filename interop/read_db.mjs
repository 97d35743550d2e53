// Reads a memory database with the real Mastra packages and prints what Mastra reports, as one JSON object.
//
// Usage: node read_db.mjs <path to SQLite file>
// Run it from a folder whose node_modules holds the packages pinned in interop/package.json
// (tests/interop/test_mastra_reads_threadmind.py installs them into a cache folder and copies this script there).
//
// Output: { threads: [...listThreads], messages: {threadId: [...recall perPage false]},
//           signals: {threadId: [the signal messages as @mastra/core's mastraDBMessageToSignal reads them]},
//           resources: {resourceId: getResourceById}, workingMemory: {resource: {resourceId: text|null},
//           thread: {threadId: text|null}} }

import { LibSQLStore } from '@mastra/libsql';
import { Memory } from '@mastra/memory';
import { mastraDBMessageToSignal } from '@mastra/core/agent';
import path from 'node:path';

const file = process.argv[2];
if (!file) {
  console.error('usage: node read_db.mjs <sqlite file>');
  process.exit(2);
}

const storage = new LibSQLStore({ id: 'threadmind-interop', url: `file:${path.resolve(file)}` });
const memory = new Memory({
  storage,
  options: { lastMessages: 10, semanticRecall: false, workingMemory: { enabled: true, scope: 'resource' } },
});

const threadScope = { workingMemory: { enabled: true, scope: 'thread' } };

async function main() {
  const { threads } = await memory.listThreads({ perPage: false, orderBy: { field: 'createdAt', direction: 'ASC' } });
  const messages = {};
  const signals = {};
  const resources = {};
  const workingMemory = { resource: {}, thread: {} };
  const store = await storage.getStore('memory');
  for (const thread of threads) {
    const recalled = await memory.recall({ threadId: thread.id, resourceId: thread.resourceId, perPage: false });
    messages[thread.id] = recalled.messages;
    // Mastra's own parser of stored signals (what its state-signal runner reads back)
    signals[thread.id] = recalled.messages
      .filter((message) => message.role === 'signal')
      .map((message) => {
        const signal = mastraDBMessageToSignal(message);
        return { type: signal.type, tagName: signal.tagName, contents: signal.contents, metadata: signal.metadata };
      });
    workingMemory.thread[thread.id] = await memory.getWorkingMemory({
      threadId: thread.id,
      resourceId: thread.resourceId,
      memoryConfig: threadScope,
    });
    if (!(thread.resourceId in resources)) {
      resources[thread.resourceId] = await store.getResourceById({ resourceId: thread.resourceId });
      workingMemory.resource[thread.resourceId] = await memory.getWorkingMemory({
        threadId: thread.id,
        resourceId: thread.resourceId,
      });
    }
  }
  process.stdout.write(JSON.stringify({ threads, messages, signals, resources, workingMemory }));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(`read_db.mjs: ${error?.stack ?? error}`);
    process.exit(1);
  },
);
