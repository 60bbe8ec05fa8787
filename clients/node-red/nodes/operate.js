"use strict";
// `opsconsole operate`: one management call on an operation (docs/api-for-flows.md), chosen in the
// node or by msg.operation: get, approve (with the fingerprint the approver saw), reject, replay,
// resolve (with the vendor's record id), cancel; pause and resume. Output 1: done (msg.payload the
// answer); output 2: refused (msg.status, msg.message: e.g. stale_fingerprint, four_eyes).
const { Refused } = require("opsconsole-client");
const { describe, connection } = require("../lib/errors");

// Each takes what it needs from msg.<name>, or else msg.payload.<name> (a button's JSON body).
const OPERATIONS = {
  get: (ops, msg) => ops.operation(keyOf(msg)),
  approve: (ops, msg) =>
    ops.approve(keyOf(msg), defined({ fingerprint: required(msg, "fingerprint"), reason: optional(msg, "reason") })),
  reject: (ops, msg) => ops.reject(keyOf(msg), { fingerprint: required(msg, "fingerprint"), reason: required(msg, "reason") }),
  replay: (ops, msg) =>
    ops.replay(
      keyOf(msg),
      defined({
        reason: required(msg, "reason"),
        accept_config_change: optional(msg, "acceptConfigChange"),
        force_unknown: optional(msg, "forceUnknown"),
      }),
    ),
  resolve: (ops, msg) => ops.resolve(keyOf(msg), { externalId: String(required(msg, "externalId")), note: required(msg, "note") }),
  cancel: (ops, msg) => ops.cancel(keyOf(msg), { reason: required(msg, "reason") }),
  pause: (ops, msg) => ops.pause(pauseOf(msg.payload)),
  resume: (ops, msg) => ops.resume(pauseIdOf(msg)),
};

function optional(msg, name) {
  const value = msg[name] ?? (msg.payload && typeof msg.payload === "object" ? msg.payload[name] : undefined);
  return value === null || value === "" ? undefined : value;
}

function required(msg, name) {
  const value = optional(msg, name);
  if (value === undefined) throw new Error(`msg.${name} (or msg.payload.${name}) is required`);
  return value;
}

function keyOf(msg) {
  return String(required(msg, "key"));
}

function defined(body) {
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
}

function pauseOf(payload) {
  if (!payload || typeof payload !== "object" || !payload.scope || !payload.reason) {
    throw new Error('msg.payload must be the pause: {"scope": "workspace" | "action" | "destination", "reason", "action"?, "destination"?}');
  }
  // Only the pause's fields: the payload may carry others (msg.payload.operation, say).
  const { scope, reason, action, destination } = payload;
  return defined({ scope, reason, action, destination });
}

// A pause's id: msg.pauseId, or the answer of the pause that made it (msg.payload.pauses[0].id).
function pauseIdOf(msg) {
  const id = optional(msg, "pauseId") ?? msg.payload?.pauses?.[0]?.id ?? msg.payload?.id;
  if (!Number.isInteger(Number(id))) throw new Error("msg.pauseId (the pause's id) is required");
  return Number(id);
}

module.exports = function (RED) {
  function OpsconsoleOperate(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);

    node.on("input", async (msg, send, done) => {
      const name = config.operation || msg.operation;
      try {
        const operation = Object.hasOwn(OPERATIONS, name) ? OPERATIONS[name] : undefined; // not "constructor"
        if (!operation) throw new Error(`unknown operation "${name}": one of ${Object.keys(OPERATIONS).join(", ")}`);
        msg.payload = await operation(server.client(), msg);
        msg.status = msg.payload?.status;
        node.status({ fill: "green", shape: "dot", text: `${name}: ${msg.status ?? "ok"}` });
        send([msg, null]);
        done();
      } catch (error) {
        if (error instanceof Refused) {
          msg.status = error.status || `http_${error.httpStatus}`;
          msg.reason = error.reason;
          msg.statusCode = error.httpStatus;
          msg.message = describe(error);
          node.status({ fill: "red", shape: "dot", text: `${name}: ${msg.status}` });
          send([null, msg]);
          done();
        } else {
          node.status({ fill: "red", shape: "ring", text: "error" });
          done(new Error(describe(error)));
        }
      }
    });
  }

  RED.nodes.registerType("opsconsole operate", OpsconsoleOperate);
};
