// The LangGraph.js snippet of docs/harnesses.md, a router node then a streamed handler node,
// through dynrt serve: node langgraph.mjs BASE_URL RUN_ID QUERY. Prints how each call was served.
import { ChatOpenAI } from '@langchain/openai';
import { StateGraph, Annotation, START, END } from '@langchain/langgraph';

const [base, runIdArg, query] = process.argv.slice(2);
const ROUTER_SYSTEM =
  'You route requests to handlers. Think step by step, then end with one line ' +
  '`HANDLER: <name>`, where <name> is weather, calendar or email.';
const handlerSystem = (h) =>
  `You are the ${h} handler. Reply with exactly one JSON object ` +
  `{"function": ..., "arguments": {...}} that calls the ${h} API.`;

// --- as in docs/harnesses.md ---
const served = [];
const model = (maxTokens) =>
  new ChatOpenAI({
    model: 'qwen3-32b',
    temperature: 0,
    maxTokens, // sent as max_tokens: the template's params must say so
    apiKey: 'unused',
    configuration: {
      baseURL: base + '/v1',
      defaultHeaders: { 'X-DynRT-Workflow': 'routing' },
      fetch: async (url, init) => { // how each call was served
        const res = await fetch(url, init);
        served.push(res.headers.get('X-DynRT-Served') ?? 'untagged');
        return res;
      },
    },
  });
const routerLlm = model(512);
const handleLlm = model(256);

const State = Annotation.Root({
  runId: Annotation(),
  query: Annotation(),
  handler: Annotation(),
  answer: Annotation(),
});
const tags = (runId, stage) => {
  const headers = { 'X-DynRT-Workflow-Id': runId, 'X-DynRT-Stage': stage };
  return { headers, options: { headers } }; // both: the streaming path reads only one
};

const graph = new StateGraph(State)
  .addNode('router', async (s) => {
    const msg = await routerLlm.invoke([['system', ROUTER_SYSTEM], ['user', s.query]],
                                       tags(s.runId, 'router'));
    return { handler: /HANDLER:\s*(\w+)/.exec(String(msg.content))[1] };
  })
  .addNode('handle', async (s) => {
    let answer = '';
    const stream = await handleLlm.stream([['system', handlerSystem(s.handler)], ['user', s.query]],
                                          tags(s.runId, 'handle'));
    for await (const chunk of stream) answer += String(chunk.content);
    return { answer };
  })
  .addEdge(START, 'router')
  .addEdge('router', 'handle')
  .addEdge('handle', END)
  .compile();
const out = await graph.invoke({ runId: runIdArg, query });
// --- end of the snippet ---

console.log(JSON.stringify({ served, handler: out.handler, handle: out.answer }));
