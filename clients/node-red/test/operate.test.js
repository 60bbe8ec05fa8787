"use strict";
// The operate node in a stand-in for Node-RED's runtime.
const test = require("node:test");
const assert = require("node:assert/strict");
const { EventEmitter } = require("node:events");

function operateNode(operation) {
  let Operate;
  const RED = {
    nodes: {
      createNode(node, config) {
        Object.setPrototypeOf(node, EventEmitter.prototype);
        EventEmitter.call(node);
        Object.assign(node, { id: config.id, status() {}, error() {} });
      },
      getNode: () => ({ client: () => ({ operation: async () => ({ status: "ok" }) }) }),
      registerType(_type, constructor) {
        Operate = constructor;
      },
    },
  };
  require("../nodes/operate")(RED);
  const node = {};
  Operate.call(node, { id: "op", server: "cfg", operation });
  return node;
}

function run(node, msg) {
  return new Promise((resolve) => {
    node.emit("input", msg, (outputs) => resolve({ outputs }), (error) => error && resolve({ error }));
  });
}

test("msg.operation names one of the node's operations, not a property every object has", async () => {
  // "constructor" called Object(client) and sent the client itself on "done".
  for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
    const { error } = await run(operateNode(""), { operation: name, key: "k" });
    assert.match(String(error), /unknown operation/, name);
  }
  const { outputs } = await run(operateNode(""), { operation: "get", key: "k" });
  assert.deepEqual(outputs[0].payload, { status: "ok" });
});
