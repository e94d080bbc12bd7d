// The interceptor of clients/node/dynrt-fetch.mjs on the LangGraph.js graph of langgraph.mjs:
// each node declares its stage in one line, the run id comes from the graph invocation.
// node langgraph_interceptor.mjs BASE_URL QUERY. Prints how each call was served and the ids.
import { ChatOpenAI } from '@langchain/openai';
import { StateGraph, Annotation, START, END } from '@langchain/langgraph';
import { dynrtFetch, run, stage } from './dynrt-fetch.mjs';
import { ROUTER_SYSTEM, handlerSystem } from './routing.mjs';

const [base, query] = process.argv.slice(2);
const served = [];
const ids = [];
const tagged = dynrtFetch(async (url, init) => {
  const res = await fetch(url, init);
  served.push(res.headers.get('X-DynRT-Served') ?? 'untagged');
  ids.push(new Headers(init.headers).get('X-DynRT-Workflow-Id'));
  return res;
});
// --- as in docs/harnesses.md ---
const model = (maxTokens) => new ChatOpenAI({
  model: 'qwen3-32b', temperature: 0, maxTokens, apiKey: 'unused',
  configuration: { baseURL: base + '/v1', fetch: tagged },
});
const routerLlm = model(512);
const handleLlm = model(256);

const State = Annotation.Root({ query: Annotation(), handler: Annotation(), answer: Annotation() });
const graph = new StateGraph(State)
  .addNode('router', async (s) => {
    const msg = await stage('router', () =>
      routerLlm.invoke([['system', ROUTER_SYSTEM], ['user', s.query]]));
    return { handler: /HANDLER:\s*(\w+)/.exec(String(msg.content))[1] };
  })
  .addNode('handle', async (s) => {
    let answer = '';
    const stream = await stage('handle', () =>
      handleLlm.stream([['system', handlerSystem(s.handler)], ['user', s.query]]));
    for await (const chunk of stream) answer += String(chunk.content);
    return { answer };
  })
  .addEdge(START, 'router')
  .addEdge('router', 'handle')
  .addEdge('handle', END)
  .compile();
// Each invocation is one workflow run with an id of its own; two at once keep theirs apart.
const [out] = await Promise.all([
  run('routing', () => graph.invoke({ query })),
  run('routing', () => graph.invoke({ query: query + ' (second)' })),
]);
// --- end of the snippet ---

console.log(JSON.stringify({ served, ids, handler: out.handler, handle: out.answer }));
