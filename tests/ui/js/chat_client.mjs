// A headless useChat: the `ai` package's own AbstractChat + DefaultChatTransport, as a browser runs them.
//
//   node chat_client.mjs '<plan json>'
//
// plan = {
//   api: "http://127.0.0.1:PORT/api/chat",
//   chatId: "chat-1" (optional: the chat's id, sent as the body's `id`),
//   history: "http://127.0.0.1:PORT/api/history" (optional: load it and check it with validateUIMessages),
//   clientTools: {"<toolName>": <output>},  // answered from onToolCall with addToolOutput
//   steps: [{send: "text", stopOnText?: "..."}]  // stopOnText: chat.stop() once the reply contains it
// }
//
// Prints one JSON object: the chat's messages after every step, what the callbacks saw, and the history check.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
  validateUIMessages,
} from 'ai';

const plan = JSON.parse(process.argv[2]);

class MemoryChatState {
  constructor(onChange) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
    this.onChange = onChange;
  }
  pushMessage = message => {
    this.messages = this.messages.concat(message);
    this.onChange(this.messages);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
    this.onChange(this.messages);
  };
  snapshot = value => structuredClone(value);
}

class HeadlessChat extends AbstractChat {
  constructor({ onChange, ...init }) {
    super({ ...init, state: new MemoryChatState(onChange) });
  }
}

const seen = { toolCalls: [], data: [], finishes: [], errors: [] };
let stopOnText = null;
let chat;

function replyText(messages) {
  const last = messages[messages.length - 1];
  if (last == null || last.role !== 'assistant') return '';
  return last.parts.filter(p => p.type === 'text').map(p => p.text).join('');
}

chat = new HeadlessChat({
  id: plan.chatId ?? 'chat-1',
  transport: new DefaultChatTransport({ api: plan.api }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  onToolCall: ({ toolCall }) => {
    seen.toolCalls.push({ toolName: toolCall.toolName, toolCallId: toolCall.toolCallId, input: toolCall.input });
    const clientTools = plan.clientTools ?? {};
    if (Object.hasOwn(clientTools, toolCall.toolName)) {
      // not awaited, as the AI SDK documents (the callback runs inside the stream's job)
      void chat.addToolOutput({
        tool: toolCall.toolName,
        toolCallId: toolCall.toolCallId,
        output: clientTools[toolCall.toolName],
      });
    }
  },
  onData: part => seen.data.push(part),
  onError: error => seen.errors.push(error.message),
  onFinish: ({ message, isAbort, isDisconnect, isError, finishReason }) =>
    seen.finishes.push({ messageId: message.id, isAbort, isDisconnect, isError, finishReason: finishReason ?? null }),
  onChange: messages => {
    if (stopOnText != null && replyText(messages).includes(stopOnText)) {
      stopOnText = null;
      void chat.stop();
    }
  },
});

const steps = [];
for (const step of plan.steps) {
  stopOnText = step.stopOnText ?? null;
  await chat.sendMessage({ text: step.send });
  steps.push({
    send: step.send,
    status: chat.status,
    error: chat.error ? chat.error.message : null,
    messages: structuredClone(chat.messages),
  });
}

let history = null;
if (plan.history) {
  const response = await fetch(plan.history);
  const messages = await response.json();
  let valid = true;
  let problem = null;
  try {
    await validateUIMessages({ messages });
  } catch (error) {
    valid = false;
    problem = error.message;
  }
  history = { messages, valid, problem };
}

process.stdout.write(JSON.stringify({ steps, messages: chat.messages, ...seen, history }));
