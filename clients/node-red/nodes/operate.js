"use strict";
// `opsconsole operate`: one management call on an operation (docs/api-for-flows.md), chosen in the
// node or by msg.operation: get, approve (with the fingerprint the approver saw), reject, replay,
// resolve (with the vendor's record id), cancel; pause and resume. Output 1: done (msg.payload the
// answer); output 2: refused (msg.status, msg.message: e.g. stale_fingerprint, four_eyes).
const { Refused } = require("opsconsole-client");
const { describe, connection } = require("../lib/errors");

const OPERATIONS = {
  get: (ops, msg) => ops.operation(keyOf(msg)),
  approve: (ops, msg) => ops.approve(keyOf(msg), { fingerprint: required(msg.fingerprint, "msg.fingerprint") }),
  reject: (ops, msg) => ops.reject(keyOf(msg), { reason: required(msg.reason, "msg.reason") }),
  replay: (ops, msg) => ops.replay(keyOf(msg)),
  resolve: (ops, msg) => ops.resolve(keyOf(msg), { externalId: required(msg.externalId, "msg.externalId") }),
  cancel: (ops, msg) => ops.cancel(keyOf(msg), { reason: msg.reason }),
  pause: (ops, msg) => ops.pause(objectOf(msg.payload)),
  resume: (ops, msg) => ops.resume(required(msg.pauseId ?? msg.payload?.id, "msg.pauseId")),
};

function keyOf(msg) {
  return required(msg.key, "msg.key (the operation's key)");
}

function required(value, name) {
  if (value === undefined || value === null || value === "") throw new Error(`${name} is required`);
  return value;
}

function objectOf(payload) {
  if (!payload || typeof payload !== "object") throw new Error("msg.payload must be the pause, an object");
  return payload;
}

module.exports = function (RED) {
  function OpsconsoleOperate(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);

    node.on("input", async (msg, send, done) => {
      const name = config.operation || msg.operation;
      try {
        const operation = OPERATIONS[name];
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
