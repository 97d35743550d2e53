// The real @mastra/pg PgVector on a PostgreSQL database shared with threadmind's PgVectorStore.
//
// Usage (from a folder whose node_modules holds the packages pinned in interop/pg/package-lock.json;
// tests/interop/test_mastra_pgvector.py installs them with tests/_npm.py):
//   node mastra_pgvector.mjs query  <dsn> <request.json>   run PgVector.query for each query of the request
//   node mastra_pgvector.mjs upsert <dsn> <request.json>   create the index the way @mastra/memory does
//                                                          (createIndex with metadataIndexes thread_id, resource_id)
//                                                          and upsert the request's vectors with their metadata
//
// query request:  { indexName, queries: [{ vector: number[], topK, filter }] }
// upsert request: { indexName, dimension, vectors: number[][], metadata: object[] }
// Output: one JSON object { describe: PgVector.describeIndex, results: [[{ id, score, metadata }...]...],
//                           ids: [vector ids upserted] }.

import { PgVector } from '@mastra/pg';
import fs from 'node:fs';

const [mode, dsn, requestPath] = process.argv.slice(2);
if (!mode || !dsn || !requestPath) {
  console.error('usage: node mastra_pgvector.mjs query|upsert|create <dsn> <request.json>');
  process.exit(2);
}
const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
const vector = new PgVector({ id: 'threadmind-interop', connectionString: dsn });

async function main() {
  const out = {};
  if (mode === 'upsert') {
    await vector.createIndex({
      indexName: request.indexName,
      dimension: request.dimension,
      metadataIndexes: ['thread_id', 'resource_id'],
    });
    out.ids = await vector.upsert({ indexName: request.indexName, vectors: request.vectors, metadata: request.metadata });
  } else if (mode === 'create') {
    await vector.createIndex({ indexName: request.indexName, dimension: request.dimension,
                               indexConfig: request.indexConfig, metadataIndexes: ['thread_id', 'resource_id'] });
  } else if (mode === 'query') {
    out.results = [];
    for (const q of request.queries) {
      out.results.push(await vector.query({ indexName: request.indexName, queryVector: q.vector, topK: q.topK,
                                            filter: q.filter }));
    }
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  out.describe = await vector.describeIndex({ indexName: request.indexName });
  return out;
}

main().then(
  async (result) => {
    process.stdout.write(JSON.stringify(result));
    await vector.disconnect?.();
    process.exit(0);
  },
  (error) => {
    console.error(`mastra_pgvector.mjs: ${error?.stack ?? error}`);
    process.exit(1);
  },
);
