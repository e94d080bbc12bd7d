// The Routing workflow's prompts, as the other end-to-end scripts (tests/e2e/routing.py) send them.
export const ROUTER_SYSTEM =
  'You route requests to handlers. Think step by step, then end with one line ' +
  '`HANDLER: <name>`, where <name> is weather, calendar or email.';
export const handlerSystem = (h) =>
  `You are the ${h} handler. Reply with exactly one JSON object ` +
  `{"function": ..., "arguments": {...}} that calls the ${h} API.`;
