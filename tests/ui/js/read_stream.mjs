// Reads UI message stream bytes (server-sent events) from stdin the way the AI SDK's DefaultChatTransport does:
// parseJsonEventStream + uiMessageChunkSchema for every chunk, then readUIMessageStream for the message it builds.
//
//   node read_stream.mjs < body.sse
//
// Prints {"chunks": [{"ok": true, "value": ...} | {"ok": false, "error": "..."}], "message": UIMessage | null,
//         "errors": ["..."]}  (errors: what readUIMessageStream reported, e.g. `error` chunks)
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from 'ai';

const input = [];
for await (const piece of process.stdin) input.push(piece);
const bytes = new Uint8Array(Buffer.concat(input));

const source = new ReadableStream({
  start(controller) {
    controller.enqueue(bytes);
    controller.close();
  },
});

const chunks = [];
const valid = [];
const reader = parseJsonEventStream({ stream: source, schema: uiMessageChunkSchema }).getReader();
for (;;) {
  const { done, value } = await reader.read();
  if (done) break;
  if (value.success) {
    chunks.push({ ok: true, value: value.value });
    valid.push(value.value);
  } else {
    chunks.push({ ok: false, error: String(value.error?.message ?? value.error) });
  }
}

const errors = [];
let message = null;
const replay = new ReadableStream({
  start(controller) {
    for (const chunk of valid) controller.enqueue(chunk);
    controller.close();
  },
});
for await (const snapshot of readUIMessageStream({ stream: replay, onError: error => errors.push(String(error?.message ?? error)) })) {
  message = snapshot;
}

process.stdout.write(JSON.stringify({ chunks, message, errors }));
