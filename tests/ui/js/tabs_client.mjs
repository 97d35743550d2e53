// Several headless useChat tabs at once (the `ai` package's own AbstractChat + DefaultChatTransport), in one node
// process: the tabs of one user on one chat id, or of several users, sending while the others' replies stream.
//
//   node tabs_client.mjs '<plan json>'
//
// plan = {
//   api: "http://127.0.0.1:PORT/api/chat",
//   tabs: [{chatId: "chat-1", user: "alice" (sent as x-user-id), sends: ["text", ...]}]
// }
//
// Prints one JSON array: per tab, its messages after its last send, and the errors its callbacks saw.
import { AbstractChat, DefaultChatTransport } from 'ai';

const plan = JSON.parse(process.argv[2]);

class MemoryChatState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = message => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), structuredClone(message), ...this.messages.slice(index + 1)];
  };
  snapshot = value => structuredClone(value);
}

class HeadlessChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryChatState() });
  }
}

async function runTab(tab) {
  const errors = [];
  const chat = new HeadlessChat({
    id: tab.chatId,
    transport: new DefaultChatTransport({ api: plan.api, headers: tab.user ? { 'x-user-id': tab.user } : {} }),
    onError: error => errors.push(error.message),
  });
  for (const text of tab.sends) {
    await chat.sendMessage({ text });
  }
  return { chatId: tab.chatId, user: tab.user ?? null, messages: chat.messages, errors };
}

const results = await Promise.all(plan.tabs.map(runTab));
process.stdout.write(JSON.stringify(results));
