// One coding-agent session with the Anthropic SDK, as an agent that runs its tools locally
// sends it (templates/coding-agent.yaml): the task, a file read, a question to the person with
// three options, the pick, the edit. node coding_agent.mjs BASE_URL TASK [RUN_ID]
//   - with RUN_ID, every call is tagged with the three X-DynRT-* headers;
//   - without, the calls carry no dynrt header at all, as Claude Code's do.
// Before answering the question it waits, as a person would, until dynrt has finished filling
// the options (fills started and none running, read from /metrics; at most 20 s; skipped when
// BASE_URL is the engine itself).
// Prints every answer's content blocks and how each call was served.
import Anthropic from '@anthropic-ai/sdk';

const [base, task, runId] = process.argv.slice(2);
const SYSTEM =
  'You are a coding agent. Use the tools to read and change the repository, and ask the user ' +
  'with ask_user when the choice is theirs.';
const TOOLS = [
  { name: 'read_file', description: 'Read a file.', input_schema: { type: 'object', properties: { path: { type: 'string' } } } },
  { name: 'edit_file', description: 'Replace text in a file.', input_schema: { type: 'object', properties: { path: { type: 'string' }, old: { type: 'string' }, new: { type: 'string' } } } },
  { name: 'ask_user', description: 'Ask the user to pick one option.', input_schema: { type: 'object', properties: { question: { type: 'string' }, options: { type: 'array', items: { type: 'string' } } } } },
];
// What the tools give back on the developer's machine.
const LOCAL = {
  read_file: () => 'def add(a, b): return a - b',
  edit_file: (input) => `${input.path} was edited`,
};
const PICK = 'Patch add in place';

const tag = (stage) => (runId ? { 'X-DynRT-Workflow': 'coding-agent', 'X-DynRT-Workflow-Id': runId, 'X-DynRT-Stage': stage } : {});
const client = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });

// dynrt's figures, or null when BASE_URL is the engine itself.
async function figures() {
  const r = await fetch(base + '/metrics');
  if (!r.ok) return null;
  const text = await r.text();
  if (!text.includes('dynrt_fills_issued_total')) return null;  // the engine's own metrics
  const read = (name) => Number(new RegExp('^' + name + ' (\\d+)', 'm').exec(text)?.[1] ?? 0);
  return { issued: read('dynrt_fills_issued_total'), running: read('dynrt_fills_running') };
}
// Until fills started after `before` have all ended.
async function filled(before) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const now = await figures();
    if (now.issued > before.issued && now.running === 0) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

const messages = [{ role: 'user', content: [{ type: 'text', text: task }] }];
const out = { served: [], content: [] };
const body = () => ({ model: 'qwen3-32b', temperature: 0, max_tokens: 1024, system: SYSTEM, tools: TOOLS, messages });
for (let turn = 0; turn < 6; ++turn) {
  const last = messages.at(-1).content[0];
  const answering = last.type === 'tool_result' && messages.at(-2).content.at(-1).name === 'ask_user';
  let message, response;
  const before = await figures();
  if (answering) {
    // The turn after the pick is streamed: a fill's result is replayed as the same events.
    const stream = client.messages.stream(body(), { headers: tag('answer') });
    message = await stream.finalMessage();
    response = (await stream.withResponse()).response;
  } else {
    ({ data: message, response } = await client.messages.create(body(), { headers: tag('turn') }).withResponse());
  }
  out.served.push(response.headers.get('x-dynrt-served') ?? 'engine');
  out.content.push(message.content);
  const call = message.content.at(-1);
  if (call.type !== 'tool_use') break;
  messages.push({ role: 'assistant', content: message.content });
  let result;
  if (call.name === 'ask_user') {
    if (before) out.options_filled = await filled(before);
    result = PICK;
  } else {
    result = LOCAL[call.name](call.input);
  }
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: result }] });
}
console.log(JSON.stringify(out));
