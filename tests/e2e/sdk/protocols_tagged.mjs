// Tagged runs of the triage templates (tests/e2e/data/protocols), one in the Anthropic Messages
// protocol with the Anthropic SDK and one in the OpenAI Responses protocol with the OpenAI SDK:
// node protocols_tagged.mjs BASE_URL RUN_ID QUERY. The router runs whole, the handler streamed;
// prints how each call was served and every answer's text.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const [base, runId, query] = process.argv.slice(2);
const ROUTER =
  'You route requests to handlers. Think step by step, then end with one line ' +
  '`HANDLER: <name>`, where <name> is weather, calendar or email.';
const HANDLER = (h) => `You are the ${h} handler. Answer in one short paragraph.`;
const pick = (text) => /HANDLER:\s*(weather|calendar|email)/.exec(text)?.[1];
const out = {};

{
  const client = new Anthropic({
    baseURL: base,
    apiKey: 'unused',
    maxRetries: 0,
    defaultHeaders: { 'X-DynRT-Workflow': 'triage-messages', 'X-DynRT-Workflow-Id': runId },
  });
  const { data: router, response } = await client.messages
    .create(
      { model: 'qwen3-32b', temperature: 0, max_tokens: 512, system: ROUTER, messages: [{ role: 'user', content: query }] },
      { headers: { 'X-DynRT-Stage': 'router' } },
    )
    .withResponse();
  const text = router.content.map((b) => b.text ?? '').join('');
  const handler = pick(text);
  const streamed = await client.messages
    .create(
      {
        model: 'qwen3-32b',
        temperature: 0,
        max_tokens: 256,
        system: HANDLER(handler),
        messages: [{ role: 'user', content: query }],
        stream: true,
      },
      { headers: { 'X-DynRT-Stage': 'handle' } },
    )
    .withResponse();
  let handle = '';
  for await (const ev of streamed.data)
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') handle += ev.delta.text;
  out.messages = {
    served: [response.headers.get('x-dynrt-served'), streamed.response.headers.get('x-dynrt-served')],
    handler,
    router: text,
    handle,
  };
}
{
  const client = new OpenAI({
    baseURL: base + '/v1',
    apiKey: 'unused',
    maxRetries: 0,
    defaultHeaders: { 'X-DynRT-Workflow': 'triage-responses', 'X-DynRT-Workflow-Id': runId },
  });
  const { data: router, response } = await client.responses
    .create(
      { model: 'qwen3-32b', temperature: 0, max_output_tokens: 512, instructions: ROUTER, input: query },
      { headers: { 'X-DynRT-Stage': 'router' } },
    )
    .withResponse();
  const handler = pick(router.output_text);
  const streamed = await client.responses
    .create(
      { model: 'qwen3-32b', temperature: 0, max_output_tokens: 256, instructions: HANDLER(handler), input: query, stream: true },
      { headers: { 'X-DynRT-Stage': 'handle' } },
    )
    .withResponse();
  let handle = '';
  for await (const ev of streamed.data) if (ev.type === 'response.output_text.delta') handle += ev.delta;
  out.responses = {
    served: [response.headers.get('x-dynrt-served'), streamed.response.headers.get('x-dynrt-served')],
    handler,
    router: router.output_text,
    handle,
  };
}
console.log(JSON.stringify(out));
