"use strict";
// `opsconsole due`: work that may be claimed now, one message per operation with `msg.key` (wire it
// to an opsconsole claim node, which claims by the key). Either an HTTP endpoint receiving signed
// `operation.due` notifications (the signature checked; repeats of a webhook-id dropped), or a
// poll of GET /api/v1/claims/due every so many seconds.
const { verify, dueMessage, SignatureError } = require("../lib/webhooks");
const { describe, connection } = require("../lib/errors");

const SEEN_IDS = 1000; // webhook-ids remembered, to drop a notification sent again
// A notification is a few hundred bytes; anyone who reaches Node-RED can POST to the endpoint, so a
// body is read only up to this, before its signature can be checked.
const MAX_BODY_BYTES = 1024 * 1024;

// The signature covers the body's exact bytes, but the editor's admin API (at "/" as well, by
// default) parses every JSON body before Node-RED's HTTP routes see it. So, as Node-RED's own http in
// node does for its raw routes, a middleware first in the root app keeps the raw body of our routes.
const rawRoutes = new Set();
let capturing = false;

// Express matches routes ignoring case and a trailing slash: so does this, or a request spelled
// otherwise reaches the handler with its body already read by the editor's JSON parser.
function routeKey(path) {
  return `POST:${path.replace(/\/{2,}/g, "/").replace(/\/$/, "").toLowerCase()}`;
}

function captureRawBodies(RED) {
  if (capturing || typeof RED.httpNode !== "function") return;
  let root = RED.httpNode;
  while (root.parent !== undefined) root = root.parent;
  const capture = (req, res, next) => {
    if (req.method !== "POST" || !rawRoutes.has(routeKey(req._parsedUrl?.pathname ?? req.path))) return next();
    readBody(req)
      .then((raw) => {
        req.rawBody = raw;
        req.body = raw;
        req._body = true; // body parsers leave it alone
        next();
      })
      .catch((error) => {
        if (!(error instanceof TooLarge)) return next(error);
        // First in the root app, before express decorates `res`: Node's own response.
        res.writeHead(413, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ status: "too_large", message: error.message }));
      });
  };
  root.use(capture);
  const stack = root._router?.stack || [];
  const index = stack.findIndex((layer) => layer.handle === capture);
  if (index > 0) stack.unshift(stack.splice(index, 1)[0]);
  capturing = true;
}

class TooLarge extends Error {}

/** The request's body, at most MAX_BODY_BYTES: the rest of a longer one is read and dropped (so
 * its sender reads the answer), and it rejects with TooLarge. */
function readBody(req) {
  return new Promise((resolve, reject) => {
    let chunks = [];
    let size = 0;
    req.on("data", (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) chunks = null;
      else chunks.push(chunk);
    });
    req.on("end", () =>
      chunks ? resolve(Buffer.concat(chunks)) : reject(new TooLarge(`a notification is at most ${MAX_BODY_BYTES} bytes`)),
    );
    req.on("error", reject);
  });
}

module.exports = function (RED) {
  function OpsconsoleDue(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);
    if (config.mode === "poll") poll(node, server, config);
    else receive(node, server, config);
  }

  function receive(node, server, config) {
    const path = (config.path || "/opsconsole/due").replace(/^\/?/, "/");
    const fullPath = `${RED.httpNode.path ? RED.httpNode.path() : ""}${path}`;
    captureRawBodies(RED);
    rawRoutes.add(routeKey(fullPath));
    const seen = [];
    const handler = (req, res) => {
      // Without the raw body (read by a parser before ours) there is nothing to check the signature of.
      (req.rawBody ? Promise.resolve(req.rawBody) : req._body ? Promise.resolve(Buffer.alloc(0)) : readBody(req))
        .then((raw) => {
          let verified;
          try {
            verified = verify(server.signingSecret(), raw, req.headers);
          } catch (error) {
            if (!(error instanceof SignatureError)) throw error;
            node.warn(`refused a notification: ${error.message}`);
            res.status(401).json({ status: "unauthorized", message: error.message });
            return;
          }
          res.status(204).end();
          if (seen.includes(verified.id)) return;
          seen.push(verified.id);
          if (seen.length > SEEN_IDS) seen.shift();
          const message = dueMessage(verified, config.action);
          if (message) node.send(message);
        })
        .catch((error) => {
          if (error instanceof TooLarge) {
            res.status(413).json({ status: "too_large", message: error.message });
            return;
          }
          node.error(describe(error));
          if (!res.headersSent) res.status(500).json({ status: "error" });
        });
    };
    RED.httpNode.post(path, handler);
    node.status({ fill: "green", shape: "dot", text: `POST ${path}` });
    node.on("close", (done) => {
      rawRoutes.delete(routeKey(fullPath));
      removeRoute(path);
      done();
    });
  }

  function poll(node, server, config) {
    const everySeconds = Math.max(1, Number(config.interval) || 60);
    let stopped = false;
    let timer;
    const round = async () => {
      try {
        let cursor = null;
        do {
          const page = await server.client().due({ action: config.action || undefined, limit: 50, cursor: cursor || undefined });
          for (const operation of page.operations) node.send({ key: operation.key, action: operation.action, payload: operation });
          cursor = page.next_cursor;
        } while (cursor && !stopped);
        node.status({ fill: "green", shape: "dot", text: `polled ${new Date().toISOString().slice(11, 19)}` });
      } catch (error) {
        node.status({ fill: "red", shape: "ring", text: "poll failed" });
        node.error(`polling /api/v1/claims/due: ${describe(error)}`);
      }
      if (!stopped) timer = setTimeout(round, everySeconds * 1000);
    };
    timer = setTimeout(round, 1000);
    node.on("close", (done) => {
      stopped = true;
      clearTimeout(timer);
      done();
    });
  }

  // Express keeps routes in its router's stack: a redeploy must not leave the old handler behind.
  function removeRoute(path) {
    const stack = RED.httpNode._router?.stack || RED.httpNode.router?.stack || [];
    for (let i = stack.length - 1; i >= 0; i--) {
      const route = stack[i].route;
      if (route && route.path === path && route.methods.post) stack.splice(i, 1);
    }
  }

  RED.nodes.registerType("opsconsole due", OpsconsoleDue);
};
