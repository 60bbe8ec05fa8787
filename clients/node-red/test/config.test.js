"use strict";
// The config node's checks of its URL, in a stand-in for Node-RED's runtime.
const test = require("node:test");
const assert = require("node:assert/strict");

function connection(url) {
  let Config;
  const RED = {
    nodes: {
      createNode(node, config) {
        node.id = config.id;
        node.credentials = { token: "oc_the-token" };
      },
      registerType(_type, constructor) {
        Config = constructor;
      },
    },
  };
  require("../nodes/config")(RED);
  const node = {};
  Config.call(node, { id: "cfg", name: "ops", url });
  return node;
}

test("a URL with a user or a password is refused clearly, without repeating it", () => {
  // fetch refuses such a URL with a message that repeats it whole: the password would reach
  // msg.message, the log and a catch node, on every retry of a claim that waits forever.
  for (const url of ["https://admin:hunter2@ops.example.com", "https://hunter2@ops.example.com"]) {
    assert.throws(
      () => connection(url).client(),
      (error) => /user or a password/.test(error.message) && !error.message.includes("hunter2"),
      url,
    );
  }
});

test("a URL that is not http(s) is refused; a good one gives a client", () => {
  assert.throws(() => connection("ftp://ops.example.com").client(), /must start with http:\/\/ or https:\/\//);
  assert.equal(typeof connection("https://ops.example.com").client().claim, "function");
});
