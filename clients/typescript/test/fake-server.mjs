// A fake opsconsole for the client's unit tests (the destination boundary): a real HTTP server on a
// free port that answers each request with the next scripted answer of its route and records it.
import { createServer } from "node:http";

export async function fakeServer() {
  const scripts = new Map(); // "POST /api/v1/claims" -> [answer, ...]
  const requests = [];
  const server = createServer((request, response) => {
    let text = "";
    request.setEncoding("utf8");
    request.on("data", (chunk) => (text += chunk));
    request.on("end", async () => {
      const url = new URL(request.url, "http://fake");
      const route = `${request.method} ${url.pathname}`;
      const body = text ? JSON.parse(text) : undefined;
      requests.push({ route, method: request.method, path: url.pathname, rawPath: request.url, query: url.searchParams, headers: request.headers, body });
      const queue = scripts.get(route) ?? [];
      const next = queue.length > 1 ? queue.shift() : queue[0];
      const answer = typeof next === "function" ? await next(body, requests.at(-1)) : next;
      if (!answer) {
        response.writeHead(599, { "Content-Type": "application/json" }).end(JSON.stringify({ status: "unscripted", route }));
        return;
      }
      if (answer.hang) return; // never answers: the client's timeout ends it
      if (answer.destroy) return request.socket.destroy();
      const headers = { "Content-Type": "application/json", ...(answer.headers ?? {}) };
      response.writeHead(answer.status, headers).end(answer.raw ?? JSON.stringify(answer.body ?? {}));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    requests,
    /** Answer `route` with these, in order; the last one is repeated. */
    on(route, ...answers) {
      scripts.set(route, answers);
    },
    sent(route) {
      return requests.filter((request) => request.route === route);
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

export const KEY = "demo:INV-7:v1:send-invoice";
export const KEY_PATH = encodeURIComponent(KEY);

export function claimed(extra = {}) {
  return {
    status: 201,
    body: {
      status: "claimed",
      key: KEY,
      token: "tok-1",
      attempt: 1,
      idempotency_key: KEY,
      lease_expires_at: new Date(Date.now() + 60_000).toISOString(),
      ...extra,
    },
  };
}

export function recorded(state = "succeeded", extra = {}) {
  return { status: 200, body: { status: "recorded", key: KEY, state, ...extra } };
}
