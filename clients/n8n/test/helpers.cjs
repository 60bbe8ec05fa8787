// What the node tests share: a fake opsconsole (a real HTTP server on a free port, answering what a
// test tells it and recording what it was sent: the destination boundary, the only thing mocked), and
// the n8n contexts a node is run with (the parts of IExecuteFunctions / IWebhookFunctions it uses).
const http = require("node:http");

const TOKEN = "oc_unit_test_token";
const KEY = "demo:INV-7:create-shipment";

async function fakeOpsconsole() {
  const routes = new Map();
  const requests = [];
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => (text += chunk));
    req.on("end", () => {
      const path = req.url.split("?")[0];
      const body = text ? JSON.parse(text) : undefined;
      requests.push({ method: req.method, url: req.url, path, headers: req.headers, body });
      const route = routes.get(`${req.method} ${path}`) ?? { status: 404, body: { status: "not_found" } };
      const answer = typeof route === "function" ? route(body) : route; // a function answers from the body
      res.writeHead(answer.status, { "Content-Type": "application/json", ...(answer.headers ?? {}) });
      res.end(JSON.stringify(answer.body));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    on(route, answer) {
      routes.set(route, answer);
    },
    reset() {
      routes.clear();
      requests.length = 0;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

function claimed(extra = {}) {
  const lease = new Date(Date.now() + 30_000).toISOString();
  return {
    status: 201,
    body: { status: "claimed", key: KEY, token: "tok-1", attempt: 1, idempotency_key: KEY, lease_expires_at: lease, ...extra },
  };
}

/** The IExecuteFunctions a node's execute() reads: parameters per item, the credential, the items. */
function executeContext({ url, parameters, items = [{ json: {} }], continueOnFail = false }) {
  return {
    getNodeParameter(name, index, fallback) {
      const value = typeof parameters === "function" ? parameters(index)[name] : parameters[name];
      return value === undefined ? fallback : value;
    },
    async getCredentials(type) {
      if (type !== "opsconsoleApi") throw new Error(`no credential of type ${type}`);
      return { url, token: TOKEN, signingSecret: "" };
    },
    getInputData: () => items,
    continueOnFail: () => continueOnFail,
    getNode: () => ({ name: "Opsconsole", type: "n8n-nodes-opsconsole.opsconsole" }),
  };
}

/** The IWebhookFunctions the trigger's webhook() reads, and what it answered with. */
function webhookContext({ secret, headers, rawBody, events = ["operation.due"], action = "", staticData = {} }) {
  const response = { statusCode: 200, body: undefined };
  const context = {
    getRequestObject: () => ({ headers, rawBody: Buffer.from(rawBody), body: JSON.parse(rawBody) }),
    getResponseObject: () => ({
      status(code) {
        response.statusCode = code;
        return this;
      },
      json(body) {
        response.body = body;
        return this;
      },
    }),
    getBodyData: () => JSON.parse(rawBody),
    getNodeParameter: (name, fallback) => ({ events, action })[name] ?? fallback,
    async getCredentials() {
      return { url: "http://127.0.0.1:1", token: TOKEN, signingSecret: secret };
    },
    getWorkflowStaticData: () => staticData,
    helpers: { returnJsonArray: (items) => items.map((json) => ({ json })) },
  };
  return { context, response };
}

module.exports = { KEY, TOKEN, claimed, executeContext, fakeOpsconsole, webhookContext };
