// The official Anthropic TypeScript SDK and the OpenAI SDK's Responses API, unchanged but for
// their base URL, against one server: node protocols.mjs BASE_URL. Run once against
// dynrt-sim-engine and once against dynrt serve in front of it; the caller compares the two.
// Prints one JSON object: each call's content, how dynrt served it (null from the engine
// itself), and the errors the SDKs raised for refused requests.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const [base] = process.argv.slice(2);
const anthropic = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
const out = {};

const tools = [
  {
    name: 'read_file',
    description: 'Reads a file of the repository',
    input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
];
const conversation = [
  { role: 'user', content: 'The build fails in parser.c; fix it.' },
  {
    role: 'assistant',
    content: [
      { type: 'text', text: 'I will read the file first.' },
      { type: 'tool_use', id: 'toolu_01', name: 'read_file', input: { path: 'parser.c' } },
    ],
  },
  {
    role: 'user',
    content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'int parse(void) { return 0 }' }],
  },
];
const messageParams = {
  model: 'qwen3-32b',
  max_tokens: 96,
  temperature: 0,
  system: [{ type: 'text', text: 'You are a careful coding agent.', cache_control: { type: 'ephemeral' } }],
  messages: conversation,
  tools,
};
const text = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

// Anthropic, whole.
{
  const { data, response } = await anthropic.messages.create(messageParams).withResponse();
  out.messages_whole = { text: text(data), stop_reason: data.stop_reason, usage: data.usage, id: data.id };
  out.messages_whole.served = response.headers.get('x-dynrt-served');
}
// Anthropic, streamed through the SDK's accumulating helper.
{
  const stream = anthropic.messages.stream(messageParams);
  let deltas = '';
  stream.on('text', (t) => { deltas += t; });
  const final = await stream.finalMessage();
  out.messages_stream = { text: text(final), deltas, stop_reason: final.stop_reason, usage: final.usage, id: final.id };
}
// Anthropic, streamed as raw events.
{
  const events = await anthropic.messages.create({ ...messageParams, stream: true });
  const types = [];
  let deltas = '';
  for await (const ev of events) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') deltas += ev.delta.text;
  }
  out.messages_events = { types: [...new Set(types)], text: deltas };
}
// Anthropic, refused: extended thinking has no chat equivalent.
try {
  await anthropic.messages.create({ ...messageParams, thinking: { type: 'enabled', budget_tokens: 1024 } });
  out.messages_refused = { status: 200 };
} catch (e) {
  out.messages_refused = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message };
}

const responseParams = {
  model: 'qwen3-32b',
  instructions: 'You are a careful coding agent.',
  max_output_tokens: 96,
  temperature: 0,
  input: [
    { role: 'user', content: 'The build fails in parser.c; fix it.' },
    { type: 'function_call', call_id: 'call_01', name: 'read_file', arguments: '{"path":"parser.c"}' },
    { type: 'function_call_output', call_id: 'call_01', output: 'int parse(void) { return 0 }' },
  ],
  tools: [{ type: 'function', name: 'read_file', description: 'Reads a file', parameters: tools[0].input_schema, strict: false }],
  store: false,
};
// OpenAI Responses, whole.
{
  const { data, response } = await openai.responses.create(responseParams).withResponse();
  out.responses_whole = { text: data.output_text, status: data.status, usage: data.usage, id: data.id };
  out.responses_whole.served = response.headers.get('x-dynrt-served');
}
// OpenAI Responses, streamed as raw events.
{
  const events = await openai.responses.create({ ...responseParams, stream: true });
  const types = [];
  let deltas = '';
  let final = null;
  for await (const ev of events) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  out.responses_stream = {
    types: [...new Set(types)],
    deltas,
    text: final ? final.output.flatMap((i) => i.content ?? []).map((c) => c.text).join('') : null,
    status: final?.status,
    usage: final?.usage,
  };
}
// OpenAI Responses through the SDK's streaming helper.
{
  const stream = openai.responses.stream(responseParams);
  const final = await stream.finalResponse();
  out.responses_helper = { text: final.output_text, status: final.status };
}
// OpenAI Responses, refused: dynrt keeps no responses to continue from.
try {
  await openai.responses.create({ ...responseParams, previous_response_id: 'resp_123' });
  out.responses_refused = { status: 200 };
} catch (e) {
  out.responses_refused = { status: e.status, param: e.param, message: e.message };
}

// Tool calls: the engine's script answers this task with text and a read_file call.
const toolTask = '[tool read] what does parser.c hold';
{
  const params = { ...messageParams, messages: [{ role: 'user', content: toolTask }] };
  const whole = await anthropic.messages.create(params);
  const streamed = await anthropic.messages.stream(params).finalMessage();
  out.messages_tool = { content: whole.content, stop_reason: whole.stop_reason, streamed: streamed.content };
}
{
  const params = { ...responseParams, input: toolTask };
  const whole = await openai.responses.create(params);
  const events = await openai.responses.create({ ...params, stream: true });
  let final = null;
  const args = {};
  for await (const ev of events) {
    if (ev.type === 'response.function_call_arguments.delta') args[ev.output_index] = (args[ev.output_index] ?? '') + ev.delta;
    if (ev.type === 'response.completed') final = ev.response;
  }
  out.responses_tool = { output: whole.output, streamed: final?.output, args };
}

console.log(JSON.stringify(out));
