// The OpenAI Node SDK snippet of docs/harnesses.md, as a whole Routing run through dynrt serve:
// node openai_node.mjs BASE_URL RUN_ID QUERY. Prints how each call was served and the answers.
import OpenAI from 'openai';

const [base, runId, query] = process.argv.slice(2);
const ROUTER_SYSTEM =
  'You route requests to handlers. Think step by step, then end with one line ' +
  '`HANDLER: <name>`, where <name> is weather, calendar or email.';
const handlerSystem = (h) =>
  `You are the ${h} handler. Reply with exactly one JSON object ` +
  `{"function": ..., "arguments": {...}} that calls the ${h} API.`;

// --- as in docs/harnesses.md ---
const client = new OpenAI({
  baseURL: base + '/v1',
  apiKey: 'unused',
  defaultHeaders: { 'X-DynRT-Workflow': 'routing' },
});
const tags = (stage) => ({ 'X-DynRT-Workflow-Id': runId, 'X-DynRT-Stage': stage });
const routerMessages = [
  { role: 'system', content: ROUTER_SYSTEM },
  { role: 'user', content: query },
];

const { data: router, response } = await client.chat.completions
  .create(
    { model: 'qwen3-32b', temperature: 0, max_tokens: 512, messages: routerMessages },
    { headers: tags('router') },
  )
  .withResponse();
const served = { router: response.headers.get('X-DynRT-Served') };
// --- end of the snippet's first call ---

const handler = /HANDLER:\s*(weather|calendar|email)/.exec(router.choices[0].message.content)[1];
const handle = await client.chat.completions
  .create(
    {
      model: 'qwen3-32b',
      temperature: 0,
      max_tokens: 256,
      messages: [
        { role: 'system', content: handlerSystem(handler) },
        { role: 'user', content: query },
      ],
    },
    { headers: tags('handle') },
  )
  .withResponse();
served.handle = handle.response.headers.get('X-DynRT-Served');
const apiCall = handle.data.choices[0].message.content;

const output = await client
  .post('/dynrt/tools/call_api', { body: { api: handler, call: apiCall }, headers: tags('execute') })
  .withResponse();
served.execute = output.response.headers.get('X-DynRT-Served');
const written = await client.post('/dynrt/writes', { body: { keys: ['api:nothing'] } });

console.log(JSON.stringify({
  served,
  handler,
  router: router.choices[0].message.content,
  handle: apiCall,
  execute: output.data,
  written,
}));
