// Tags a harness's model calls for dynrt without touching each call: a `fetch` that adds
// X-DynRT-Workflow, X-DynRT-Workflow-Id and X-DynRT-Stage from the current async context.
//
//   import { dynrtFetch, run, stage } from './dynrt-fetch.mjs';
//   const llm = new ChatOpenAI({ configuration: { baseURL, fetch: dynrtFetch() } });
//   graph node:  async (s) => stage('router', () => llm.invoke(messages))
//   invocation:  await run('routing', () => graph.invoke(input))        // a new run id
//                await run('routing', () => graph.invoke(input), id)     // or your own
//
// The context follows every await inside `run` and `stage` (AsyncLocalStorage), so concurrent
// graph invocations keep their own run ids. A call made outside a stage is sent untagged (dynrt
// forwards it unchanged); headers the caller set itself win. No dependencies; Node 18 or later.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';

const context = new AsyncLocalStorage();

// Runs `fn` as one workflow run of `workflow`: every tagged call inside carries `id` (a fresh
// UUID when none is given). Returns what `fn` returns.
export function run(workflow, fn, id = randomUUID()) {
  return context.run({ workflow, id, stage: undefined }, fn);
}

// Runs `fn` as stage `name` of the current run. Outside a run, `fn` runs untagged.
export function stage(name, fn) {
  const current = context.getStore();
  if (!current) return fn();
  return context.run({ ...current, stage: name }, fn);
}

// The current tags ({workflow, id, stage}), or undefined outside a stage.
export function currentTags() {
  const c = context.getStore();
  return c && c.stage ? { ...c } : undefined;
}

// A fetch (`base`, the global one by default) that adds the current tags to each request.
export function dynrtFetch(base = globalThis.fetch) {
  return async (input, init = {}) => {
    const tags = currentTags();
    if (!tags) return base(input, init);
    const headers = new Headers(
      init.headers ?? (input instanceof Request ? input.headers : undefined));
    const set = (name, value) => { if (!headers.has(name)) headers.set(name, value); };
    set('X-DynRT-Workflow', tags.workflow);
    set('X-DynRT-Workflow-Id', tags.id);
    set('X-DynRT-Stage', tags.stage);
    return base(input, { ...init, headers });
  };
}
